-- wrk load for the batch benchmark: POST /step with 256 items, one step of
-- each of 256 sessions, the position increasing with every request.
-- Arguments after "--": BASE (the measured run starts its positions above
-- the warm-up's) and GROUPS, the number of 256-session groups per wrk
-- thread (at least its connections, so a free group is always at hand).
--
-- A group is busy from its request until the answer: two requests for the
-- same sessions in flight at once could overtake each other and be refused
-- as stale. Position P belongs to group (P - BASE) % GROUPS, and the first
-- "newest" of the answer names the group that is free again. Every item of
-- a request steps a different session, so they can share one position.
--
-- wrk calls request() once at start-up to inspect the request and never
-- sends it, so that group would wait forever: one busy for LOST requests
-- (far more than could be in flight) is taken to be lost and reused.
local ITEMS = 256
local LOST = 256
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args)
  base = tonumber(args[1]) or 0
  groups = tonumber(args[2]) or 8
  -- Each group's body, cut where the position goes: the request body is
  -- table.concat(parts, position), one call into C per request.
  parts, steps, busy = {}, {}, {}
  for g = 0, groups - 1 do
    local p = {}
    for i = 0, ITEMS - 1 do
      p[#p + 1] = (i == 0 and '{"steps":[' or '},') ..
        '{"session":"t' .. tid .. 'g' .. g .. 's' .. i .. '","pos":'
    end
    p[#p + 1] = '}]}'
    parts[g], steps[g], busy[g] = p, 1, false
  end
  nxt, sent = 0, 0
  bad_status, bad_items = 0, 0
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  local g = nxt
  sent = sent + 1
  for _ = 1, groups do
    if not busy[g] or sent - busy[g] > LOST then break end
    g = (g + 1) % groups
  end
  busy[g] = sent -- false when free
  nxt = (g + 1) % groups
  local pos = base + steps[g] * groups + g
  steps[g] = steps[g] + 1
  return wrk.format("POST", "/step", headers, table.concat(parts[g], pos))
end

-- Every item must have stepped: 200 and no error object in every answer,
-- and ITEMS results counted in every 32nd (counting copies the whole body,
-- which would make the load generator, not the server, the bottleneck).
function response(status, _, body)
  answers = (answers or 0) + 1
  if status ~= 200 then
    bad_status = bad_status + 1
  elseif body:find('"error"', 1, true) or
      (answers % 32 == 0 and select(2, body:gsub('"newest"', '')) ~= ITEMS) then
    bad_items = bad_items + 1
  end
  local p = body:match('"newest":(%d+)')
  if p then busy[(tonumber(p) - base) % groups] = false end
end

function done(summary, latency, _)
  local bad, items = 0, 0
  for _, t in ipairs(threads) do
    bad = bad + t:get("bad_status")
    items = items + t:get("bad_items")
  end
  local e = summary.errors
  local secs = summary.duration / 1e6
  io.write(string.format(
    "RESULT requests=%d seconds=%.3f rps=%.1f p50_us=%d p99_us=%d " ..
    "bad_status=%d bad_items=%d errors=%d\n",
    summary.requests, secs, summary.requests / secs,
    math.floor(latency:percentile(50)), math.floor(latency:percentile(99)),
    bad, items, e.connect + e.read + e.write + e.timeout))
end
