-- wrk script: POST one recorded Anthropic request body (read once) on every request.
local f = assert(io.open(os.getenv("HOP_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["content-type"] = "application/json"
wrk.headers["anthropic-version"] = "2023-06-01"
wrk.headers["x-api-key"] = "sk-hop"
