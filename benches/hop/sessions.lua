-- wrk script: POST one recorded Anthropic request body (read once), as 64 agents: each request
-- carries one of 64 session ids in turn, so concurrent requests are mostly different sessions,
-- as a team's agents are (one session's turns come one at a time). The requests are built once.
local f = assert(io.open(os.getenv("HOP_BODY"), "rb"))
local body = f:read("*a")
f:close()
local requests = {}
local n = 0
function init(args)
    for i = 1, 64 do
        requests[i] = wrk.format("POST", nil, {
            ["content-type"] = "application/json",
            ["anthropic-version"] = "2023-06-01",
            ["x-api-key"] = "sk-hop",
            ["x-context-guru-session"] = "hop-agent-" .. i,
        }, body)
    end
end
function request()
    n = n % 64 + 1
    return requests[n]
end
