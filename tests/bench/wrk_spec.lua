-- wrk load for the speculative-decoding benchmark: POST /step with 256
-- items, one per session, each committing the drafts of the session's
-- previous iteration (2 of its 4 accepted, 2 dropped) and sending the next
-- 4 drafts as tentative: {"session":..,"commit":P,"positions":[4],
-- "tentative":true}, one decode iteration of a speculating engine.
-- Arguments after "--": BASE and GROUPS, as in wrk_batch.lua.
--
-- Group g's k-th iteration drafts c+1..c+4 with c = BASE + g + 2*GROUPS*k,
-- so the first "newest" of an answer (c + 4) names the group that is free
-- again. The commit accepts the previous iteration's first two drafts; the
-- first request of a run commits BASE - 1, which accepts whatever an
-- earlier run left pending.
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
  stride = 2 * groups
  ids, iter, busy, prev = {}, {}, {}, {}
  for g = 0, groups - 1 do
    local p = {}
    for i = 0, ITEMS - 1 do
      p[#p + 1] = '"t' .. tid .. 'g' .. g .. 's' .. i .. '"'
    end
    ids[g], iter[g], busy[g], prev[g] = p, 1, false, base - 1
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
  busy[g] = sent
  nxt = (g + 1) % groups
  local c = base + g + stride * iter[g]
  iter[g] = iter[g] + 1
  local tail = ',"commit":' .. prev[g] .. ',"positions":[' .. (c + 1) .. ',' ..
    (c + 2) .. ',' .. (c + 3) .. ',' .. (c + 4) .. '],"tentative":true}'
  prev[g] = c + 2
  local body = '{"steps":[{"session":' ..
    table.concat(ids[g], tail .. ',{"session":') .. tail .. ']}'
  return wrk.format("POST", "/step", headers, body)
end

function response(status, _, body)
  answers = (answers or 0) + 1
  if status ~= 200 then
    bad_status = bad_status + 1
  elseif body:find('"error"', 1, true) or
      (answers % 32 == 0 and select(2, body:gsub('"newest"', '')) ~= ITEMS) then
    bad_items = bad_items + 1
  end
  local p = body:match('"newest":(%d+)')
  if p then busy[(tonumber(p) - 4 - base) % stride] = false end
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
