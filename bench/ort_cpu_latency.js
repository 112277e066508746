// ONNX Runtime (CPU execution provider) latency and throughput of an ONNX model on this machine, the
// peer of `cnnergy infer MODEL.onnx --device cpu` (closed loop, input already in memory).
// Needs onnxruntime-node from npm (`npm install --ignore-scripts onnxruntime-node` in a scratch
// directory, then NODE_PATH=that/node_modules). Usage: node ort_cpu_latency.js MODEL BATCH REQUESTS THREADS
const ort = require('onnxruntime-node');
(async () => {
  const [model, batch, requests, threads] = [process.argv[2], +process.argv[3], +process.argv[4], +process.argv[5]];
  const s = await ort.InferenceSession.create(model, {executionProviders: ['cpu'], intraOpNumThreads: threads, graphOptimizationLevel: 'all'});
  const name = s.inputNames[0];
  const x = new Float32Array(batch * 3 * 224 * 224).map(() => Math.random() * 2 - 1);
  const feeds = {[name]: new ort.Tensor('float32', x, [batch, 3, 224, 224])};
  for (let i = 0; i < 3; ++i) await s.run(feeds);
  const ms = [];
  for (let i = 0; i < requests; ++i) { const t = process.hrtime.bigint(); await s.run(feeds); ms.push(Number(process.hrtime.bigint() - t) / 1e6); }
  ms.sort((a, b) => a - b);
  const p = q => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))];
  const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
  console.log(JSON.stringify({framework: 'onnxruntime ' + ort.env.versions.common, batch, threads, requests,
    p50_ms: p(0.5), p99_ms: p(0.99), images_per_s: batch * 1000 / mean}));
})();
