-- wrk script: POST report batches with fresh ids to /api/v1/reports.
-- The report body (one report as JSON, with @ID@ where its id goes) and the batch size come
-- from the environment, written by bench/run.py: BENCH_REPORT, BENCH_BATCH.
local report = os.getenv("BENCH_REPORT")
local batch = tonumber(os.getenv("BENCH_BATCH") or "100")
local counter = 0
local prefix = ""

function setup(thread)
  thread:set("thread_id", tostring(math.random(100000, 999999)))
end

function init(args)
  -- BENCH_PREFIX tells apart wrk processes run at once (their math.random starts alike).
  prefix = string.format("wrk%s%s%09d", os.getenv("BENCH_PREFIX") or "", thread_id or "0", os.time() % 1000000000)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local parts = {}
  for i = 1, batch do
    counter = counter + 1
    parts[i] = (report:gsub("@ID@", string.format("%s%012d", prefix, counter), 1))
  end
  return wrk.format(nil, "/api/v1/reports", nil, '{"reports":[' .. table.concat(parts, ",") .. "]}")
end

function done(summary, latency, requests)
  io.write(string.format("BENCH_JSON {\"requests\":%d,\"seconds\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%d,\"non2xx\":%d}\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
