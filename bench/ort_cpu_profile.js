// ONNX Runtime (CPU execution provider) through onnxruntime-node: per-request wall times of an ONNX
// model and, optionally, ORT's own profile (JSON) and its optimised graph; the node runner of
// bench/cpu_infer_profile.py where Python's onnxruntime is absent. Needs NODE_PATH with onnxruntime-node.
// Usage: node ort_cpu_profile.js MODEL BATCH CxHxW REQUESTS WARMUP THREADS [PROFILE_PREFIX|-] [OPTIMIZED.onnx|-]
// Prints one JSON line: {"framework", "threads", "ms": [per timed request], "profile": file or null}.
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');
(async () => {
  const [model, batch, chw, requests, warmup, threads] =
      [process.argv[2], +process.argv[3], process.argv[4], +process.argv[5], +process.argv[6], +process.argv[7]];
  const prefix = process.argv[8] && process.argv[8] !== '-' ? process.argv[8] : null;
  const optimized = process.argv[9] && process.argv[9] !== '-' ? process.argv[9] : null;
  const opts = {executionProviders: ['cpu'], intraOpNumThreads: threads, graphOptimizationLevel: 'all'};
  if (prefix) Object.assign(opts, {enableProfiling: true, profileFilePrefix: prefix});
  if (optimized) opts.optimizedModelFilePath = optimized;
  const before = prefix ? new Set(fs.readdirSync(path.dirname(prefix) || '.')) : null;
  const s = await ort.InferenceSession.create(model, opts);
  const dims = [batch, ...chw.split('x').map(Number)];
  const x = new Float32Array(dims.reduce((a, b) => a * b, 1)).map(() => Math.random() * 2 - 1);
  const feeds = {[s.inputNames[0]]: new ort.Tensor('float32', x, dims)};
  for (let i = 0; i < warmup; ++i) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < requests; ++i) {
    const t = process.hrtime.bigint();
    await s.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  let profile = null;
  if (prefix) {
    s.endProfiling();  // writes PREFIX_<date>.json; onnxruntime-node does not return its name
    const dir = path.dirname(prefix) || '.';
    const base = path.basename(prefix);
    const fresh = fs.readdirSync(dir).filter(f => f.startsWith(base) && f.endsWith('.json') && !before.has(f));
    if (fresh.length === 1) profile = path.join(dir, fresh[0]);
  }
  console.log(JSON.stringify({framework: 'onnxruntime ' + ort.env.versions.common + ' (node)', threads, ms, profile}));
})().catch(e => { console.error(e.message || e); process.exit(1); });
