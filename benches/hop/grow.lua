-- wrk script: 64 agents, each sending a recorded session turn by turn as agents do: request n
-- is agent (n mod 64)'s next turn, each turn the whole history so far plus its newest step.
-- An agent that has sent the last turn starts the session again under a new id (a new task),
-- so every turn is new to sluice. The turns are read once from HOP_TURNS (a directory of
-- 0001.json, 0002.json, ...); each request is built when it is sent.
local dir = os.getenv("HOP_TURNS")
local turns = {}
for i = 1, 100000 do
    local f = io.open(string.format("%s/%04d.json", dir, i), "rb")
    if not f then break end
    turns[i] = f:read("*a")
    f:close()
end
local next_turn, cycle = {}, {}
local n = 0
function init(args)
    for agent = 1, 64 do
        next_turn[agent] = 1
        cycle[agent] = 1
    end
end
function request()
    n = n % 64 + 1
    local agent = n
    local t = next_turn[agent]
    local body = turns[t]
    if t == #turns then
        next_turn[agent] = 1
        cycle[agent] = cycle[agent] + 1
    else
        next_turn[agent] = t + 1
    end
    return wrk.format("POST", nil, {
        ["content-type"] = "application/json",
        ["anthropic-version"] = "2023-06-01",
        ["x-api-key"] = "sk-hop",
        ["x-context-guru-session"] = "hop-grow-" .. agent .. "-" .. cycle[agent],
    }, body)
end
