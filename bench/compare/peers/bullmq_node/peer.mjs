// BullMQ's (Node) adapter of the delayq benchmark; the protocol is in bench/compare/peers/common.py.
//
//   node peer.mjs --redis-url URL enqueue --jobs N (--due-ms T | --delay-s D) [--prefix b] [--ids FILE] [--chunk 1000]
//   node peer.mjs --redis-url URL enqueue --batches FILE
//   node peer.mjs --redis-url URL worker --out FILE [--ready FILE] [--concurrency 100]
//   node peer.mjs --redis-url URL produce-steady --rate R --seconds S --min-delay 1 --max-delay 5 --ids FILE [--seed 1]
//
// enqueue is queue.addBulk, --chunk jobs per call, each with jobId, delay and timestamp set so that
// timestamp + delay is the due time exactly; with --batches, one addBulk call per line of the file (a JSON
// batch {"jobs": [{"topic", "id", "body", "run_at"}]}, run_at in epoch seconds), the lines read
// before the clock starts and each parsed while timed, as every fed adapter does. worker is one Worker with --concurrency (100; BullMQ's
// default is 1) and BullMQ's other defaults. Each command prints "BENCH-RESULT {json}".
import fs from 'node:fs';
import { Queue, Worker } from 'bullmq';

const PAYLOAD = 'x'.repeat(100);
const QUEUE_NAME = 'bench';

function parseArgs(argv) {
  const args = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith('--')) {
      const key = a.slice(2).replace(/-([a-z])/g, (_, c) => c.toUpperCase());
      args[key] = argv[i + 1];
      i++;
    } else {
      args._.push(a);
    }
  }
  return args;
}

function connection(url) {
  const u = new URL(url);
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  // maxRetriesPerRequest: null is what BullMQ asks of a worker's connection.
  return { host: u.hostname, port: Number(u.port || 6379), db, maxRetriesPerRequest: null };
}

function result(fields) {
  process.stdout.write('BENCH-RESULT ' + JSON.stringify(fields) + '\n');
}

function options(jobId, dueMs) {
  const timestamp = Math.min(Date.now(), dueMs);
  return { jobId, timestamp, delay: dueMs - timestamp };
}

function idsWriter(path) {
  const lines = [];
  return {
    add: (id, due) => path && lines.push(`{"id":"${id}","due_ms":${due}}\n`),
    close: () => path && fs.appendFileSync(path, lines.join('')),
  };
}

// The same uniform delays as common.steady_plan would give is not needed: each system draws its
// own from the same distribution; a seeded generator keeps a run repeatable.
function mulberry32(seed) {
  return function () {
    let t = (seed += 0x6d2b79f5);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function enqueueFed(args) {
  const queue = new Queue(QUEUE_NAME, { connection: connection(args.redisUrl) });
  const lines = fs.readFileSync(args.batches, 'utf8').split('\n').filter((line) => line.length > 0);
  await queue.waitUntilReady();
  let jobs = 0;
  const started = process.hrtime.bigint();
  for (const line of lines) {
    const batch = JSON.parse(line).jobs;
    await queue.addBulk(
      batch.map((job) => ({ name: 'noop', data: { body: job.body }, opts: options(job.id, Math.round(job.run_at * 1000)) })),
    );
    jobs += batch.length;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await queue.close();
  result({ jobs, seconds, chunk: Math.floor(jobs / Math.max(lines.length, 1)) });
}

async function enqueue(args) {
  if (args.batches) return enqueueFed(args);
  const queue = new Queue(QUEUE_NAME, { connection: connection(args.redisUrl) });
  const jobs = Number(args.jobs);
  const prefix = args.prefix ?? 'b';
  const due = args.dueMs !== undefined ? Math.round(Number(args.dueMs)) : Math.round(Date.now() + Number(args.delayS ?? 3600) * 1000);
  const chunk = Number(args.chunk ?? 1000);
  await queue.waitUntilReady();
  const started = process.hrtime.bigint();
  for (let start = 0; start < jobs; start += chunk) {
    const batch = [];
    for (let i = start; i < Math.min(jobs, start + chunk); i++) {
      batch.push({ name: 'noop', data: { body: PAYLOAD }, opts: options(`${prefix}${i}`, due) });
    }
    await queue.addBulk(batch);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const writer = idsWriter(args.ids);
  for (let i = 0; i < jobs; i++) writer.add(`${prefix}${i}`, due);
  writer.close();
  await queue.close();
  result({ jobs, seconds, chunk });
}

async function produceSteady(args) {
  const queue = new Queue(QUEUE_NAME, { connection: connection(args.redisUrl) });
  const rate = Number(args.rate ?? 500);
  const count = Math.round(rate * Number(args.seconds ?? 30));
  const min = Number(args.minDelay ?? 1) * 1000;
  const max = Number(args.maxDelay ?? 5) * 1000;
  const random = mulberry32(Number(args.seed ?? 1));
  const prefix = args.prefix ?? 's';
  const writer = idsWriter(args.ids);
  await queue.waitUntilReady();
  const started = performance.now();
  let behind = 0;
  for (let i = 0; i < count; i++) {
    const wait = started + (i * 1000) / rate - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    behind = Math.max(behind, -wait / 1000);
    const due = Math.round(Date.now() + min + random() * (max - min));
    await queue.add('noop', { body: PAYLOAD }, options(`${prefix}${i}`, due));
    writer.add(`${prefix}${i}`, due);
  }
  writer.close();
  await queue.close();
  result({ jobs: count, seconds: (performance.now() - started) / 1000, max_behind_s: behind });
}

async function worker(args) {
  const fd = fs.openSync(args.out, 'a');
  const worker = new Worker(
    QUEUE_NAME,
    async (job) => {
      const start = performance.timeOrigin + performance.now(); // epoch ms with sub-ms precision
      fs.writeSync(fd, `{"id":"${job.id}","start_ms":${start.toFixed(3)}}\n`);
    },
    { connection: connection(args.redisUrl), concurrency: Number(args.concurrency ?? 100) },
  );
  await worker.waitUntilReady();
  if (args.ready) fs.writeFileSync(args.ready, String(process.pid));
  const stop = async () => {
    await worker.close();
    fs.closeSync(fd);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const argv = process.argv.slice(2);
const args = parseArgs(argv);
const command = args._[0];
const commands = { enqueue, worker, 'produce-steady': produceSteady };
if (!commands[command]) {
  console.error(`usage: node peer.mjs --redis-url URL (enqueue|worker|produce-steady) ...`);
  process.exit(2);
}
await commands[command](args);
