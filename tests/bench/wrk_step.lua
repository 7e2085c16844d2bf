-- wrk load for the single-step benchmark: POST /session/{id}/step with one
-- position, 64 sessions per wrk thread stepped round-robin, each with
-- strictly increasing positions. Arguments after "--": BASE (the measured
-- run starts its positions above the warm-up's) and MODE: "evictd", or
-- "floor" for a peer that answers with a fixed body.
--
-- With 32 connections a session's next step could overtake its previous one
-- on another connection and be refused as stale. So a session is busy from
-- its request until its answer: position P belongs to session
-- (P - BASE) % 64, and the "newest" of the answer names the session that is
-- free again. The floor's fixed answer names none, and its positions do
-- not matter, so there the rotation runs without waiting.
--
-- wrk calls request() once at start-up to inspect the request and never
-- sends it, so that session would wait forever: one busy for LOST requests
-- (far more than could be in flight) is taken to be lost and reused.
local SESSIONS = 64
local LOST = 4096
local threads = {}

function setup(thread)
  threads[#threads + 1] = thread
  thread:set("tid", #threads)
end

function init(args)
  base = tonumber(args[1]) or 0
  track = args[2] ~= "floor"
  paths, steps, busy = {}, {}, {}
  for i = 0, SESSIONS - 1 do
    paths[i] = "/session/t" .. tid .. "s" .. i .. "/step"
    steps[i] = 1 -- a new session already holds position 0
    busy[i] = false -- or the number of the request that made it busy
  end
  nxt, sent = 0, 0
  bad_status, bad_items = 0, 0
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  local i = nxt
  sent = sent + 1
  if track then
    for _ = 1, SESSIONS do
      if not busy[i] or sent - busy[i] > LOST then break end
      i = (i + 1) % SESSIONS
    end
    busy[i] = sent
  end
  nxt = (i + 1) % SESSIONS
  local pos = base + steps[i] * SESSIONS + i
  steps[i] = steps[i] + 1
  return wrk.format("POST", paths[i], headers, '{"pos":' .. pos .. '}')
end

-- The floor's answers are scanned the same way (and found wanting), so
-- that the load generator spends the same on every server it measures.
function response(status, _, body)
  if status ~= 200 then
    bad_status = bad_status + 1
  end
  local p = body:match('"newest":(%d+)')
  if track and p then busy[(tonumber(p) - base) % SESSIONS] = false end
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
