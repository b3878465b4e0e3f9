-- wrk script for bench/load/run.py: POST real AdmissionReview bodies to /validate, in rotation,
-- count HTTP statuses and verdicts, and print the latency percentiles run.py reads.
--
-- Usage: wrk ... -s reviews.lua https://127.0.0.1:PORT -- BODY_LIST [count]
--   BODY_LIST  a file naming one JSON body file per line
--   count      "count" (default): response() counts 2xx/non-2xx and allowed/denied verdicts;
--              "nocount": no response() (wrk then skips reading headers and bodies into Lua),
--              and only wrk's own "status > 399" counter is reported.

local threads = {}   -- setup/done environment: one entry per wrk thread

function setup(thread)
  thread:set("thread_index", #threads)
  table.insert(threads, thread)
end

-- Running environment (one per wrk thread) from here on.
local requests = {}
local position = 0

function init(args)
  local list = assert(io.open(args[1], "r"), "cannot open body list " .. tostring(args[1]))
  for path in list:lines() do
    if path ~= "" then
      local file = assert(io.open(path, "rb"), "cannot open body " .. path)
      local body = file:read("*a")
      file:close()
      requests[#requests + 1] = wrk.format("POST", "/validate", {["Content-Type"] = "application/json"}, body)
    end
  end
  list:close()
  assert(#requests > 0, "no bodies in " .. args[1])
  -- Threads start at different places in the rotation.
  position = (thread_index or 0) * math.floor(#requests / 2)
  if args[2] == "nocount" then
    response = nil
  else
    status_2xx, status_other, verdict_allowed, verdict_denied, verdict_none = 0, 0, 0, 0, 0
  end
end

function request()
  position = position % #requests + 1
  return requests[position]
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    status_2xx = status_2xx + 1
  else
    status_other = status_other + 1
  end
  if string.find(body, '"allowed":false', 1, true) then
    verdict_denied = verdict_denied + 1
  elseif string.find(body, '"allowed":true', 1, true) then
    verdict_allowed = verdict_allowed + 1
  else
    verdict_none = verdict_none + 1
  end
end

function done(summary, latency, requests)
  local counted = {status_2xx = 0, status_other = 0, verdict_allowed = 0, verdict_denied = 0, verdict_none = 0}
  local have_counts = true
  for _, thread in ipairs(threads) do
    for name, _ in pairs(counted) do
      local value = thread:get(name)
      if value == nil then have_counts = false else counted[name] = counted[name] + value end
    end
  end
  local e = summary.errors
  local out = {
    string.format('"requests":%d', summary.requests),
    string.format('"duration_us":%d', summary.duration),
    string.format('"bytes":%d', summary.bytes),
    string.format('"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}',
                  e.connect, e.read, e.write, e.status, e.timeout),
    string.format('"latency_us":{"min":%d,"mean":%.1f,"max":%d,"stdev":%.1f,"p50":%d,"p90":%d,"p95":%d,"p99":%d,"p99.9":%d}',
                  latency.min, latency.mean, latency.max, latency.stdev,
                  latency:percentile(50), latency:percentile(90), latency:percentile(95),
                  latency:percentile(99), latency:percentile(99.9)),
  }
  if have_counts then
    out[#out + 1] = string.format('"status_2xx":%d,"status_other":%d,"allowed":%d,"denied":%d,"no_verdict":%d',
                                  counted.status_2xx, counted.status_other, counted.verdict_allowed,
                                  counted.verdict_denied, counted.verdict_none)
  end
  io.write("WRK-RESULT {" .. table.concat(out, ",") .. "}\n")
end
