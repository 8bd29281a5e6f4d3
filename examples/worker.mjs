#!/usr/bin/env node
// A Workcenter worker in JavaScript: Node 20 and its fetch, no dependencies.
//
// It speaks the worker protocol (/api/worker/, see README "Workers in any
// language"): it claims a Run (a long poll), renews the lease while it works,
// reserves each model request with the item's budget before sending it and
// settles it with the usage the model reported, consumes input queued for the
// Run, and finishes with a report. Its "model" is a stand-in that waits
// --work-ms and reports usage from the request's size: replace `callModel` and
// `execute` with real work.
//
//   node examples/worker.mjs --url http://127.0.0.1:8765 [--token T] [--name N]
//        [--lease S] [--wait S] [--work-ms MS] [--max-runs N] [--exit-when-idle]
//
// The token is better read from WORKCENTER_WORKER_TOKEN: other users of the
// machine can read --token in the process list. Each step is printed as
// one JSON line on stdout. SIGTERM or Ctrl-C interrupts the Run in hand with
// its progress so far, then exits 143 or 130. A request that fails on the
// network (or times out) is sent again as it was: a claim carries an id of
// its own (clientClaimId), and it, finish, reserve and settle are recognised
// when repeated, so a retry never counts twice.

import { randomUUID } from "node:crypto";

const options = parse(process.argv.slice(2));
const base = (options.url ?? process.env.WORKCENTER_URL ?? "http://127.0.0.1:8765").replace(/\/$/, "");
const token = options.token ?? process.env.WORKCENTER_WORKER_TOKEN ?? null;
const worker = options.name ?? "js-worker";
const bootId = randomUUID().replaceAll("-", "");
const leaseSeconds = Number(options.lease ?? 60);
const waitSeconds = Number(options.wait ?? 20);
const workMs = Number(options["work-ms"] ?? 50);
const maxRuns = options["max-runs"] === undefined ? Infinity : Number(options["max-runs"]);
const RETRIES = 5;

let inHand = null; // the fence of the Run being worked on, for a graceful stop

function parse(args) {
  const out = {};
  for (let i = 0; i < args.length; i++) {
    const name = args[i].replace(/^--/, "");
    if (name === "exit-when-idle") out[name] = true;
    else out[name] = args[++i];
  }
  return out;
}

function say(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, worker, bootId, ...fields }) + "\n");
}

class Problem extends Error {
  constructor(status, body) {
    super(`${status} ${body.title}: ${body.detail}`);
    this.status = status;
    this.title = body.title;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// POST a verb; a network failure, a timeout or a 503 is sent again, the same body.
async function post(verb, body, timeoutMs = 30_000) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  for (let attempt = 1; ; attempt++) {
    let response;
    try {
      response = await fetch(`${base}/api/worker/${verb}`, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      if (attempt >= RETRIES) throw error;
      await sleep(200 * attempt);
      continue;
    }
    if (response.status === 204) return null;
    const answer = await response.json();
    if (response.ok) return answer;
    if (response.status === 503 && attempt < RETRIES) {
      await sleep(200 * attempt);
      continue;
    }
    throw new Problem(response.status, answer);
  }
}

// Renew the lease every third of it until stopped; a refused renewal means the
// Run is no longer ours: stop working on it.
function keepRenewing(fence, lost) {
  const timer = setInterval(async () => {
    try {
      await post("renew", { fence, leaseSeconds });
      say("renewed", { runId: fence.runId });
    } catch (error) {
      clearInterval(timer);
      say("lost", { runId: fence.runId, error: String(error.message ?? error) });
      lost.abort();
    }
  }, (leaseSeconds * 1000) / 3);
  return () => clearInterval(timer);
}

// A stand-in for a model call: waits, then reports usage from the request size.
async function callModel(request, signal) {
  const steps = Math.max(1, Math.ceil(workMs / 50));
  for (let i = 0; i < steps; i++) {
    if (signal.aborted) throw new Error("the Run was lost");
    await sleep(workMs / steps);
  }
  const input = Math.ceil(JSON.stringify(request.messages).length / 4);
  return { text: "done", usage: { input_tokens: input, output_tokens: 16 } };
}

async function meteredCall(fence, n, request, signal) {
  const requestId = `${fence.runId}:${n}`;
  const admission = await post("requests/reserve", { fence, requestId, request });
  if (!admission.allowed) {
    const error = new Error(`the budget refused the request: ${admission.code}`);
    error.code = admission.code;
    throw error;
  }
  let usage = null;
  let complete = false;
  try {
    const reply = await callModel(request, signal);
    usage = reply.usage;
    complete = true;
    return reply;
  } finally {
    await post("requests/settle", { fence, requestId, usage, complete });
  }
}

async function execute(claim, signal) {
  const { fence } = claim;
  const queued = await post("input", { fence });
  const notes = [...claim.inputs, ...queued.inputs].map((i) => i.text);
  if (queued.inputs.length) {
    await post("input/consume", { fence, inputIds: queued.inputs.map((i) => i.id) });
  }
  const request = {
    messages: [
      { role: "system", content: `You run a ${claim.actionType} Action.` },
      { role: "user", content: [claim.brief.objective, ...notes].join("\n") },
    ],
    max_tokens: 256,
  };
  try {
    await meteredCall(fence, 1, request, signal);
  } catch (error) {
    if (error.code) {
      return { outcome: "failed", error: error.message, failureKind: "resource_stop", failureCode: error.code };
    }
    throw error;
  }
  return {
    outcome: "completed",
    // A completed review must decide (else it is recorded as failed): this stand-in
    // approves; a real reviewer says "changes_requested" when it finds any.
    ...(claim.actionType === "review" ? { reviewDecision: "approved" } : {}),
    summary: `${claim.actionType}: ${claim.brief.objective}`.slice(0, 500),
    evidence: [`${worker} ran ${claim.actionType}`],
    acceptanceChecks: claim.acceptanceCriteria.map((criterion) => ({
      criterion,
      status: "passed",
      evidence: "run by the reference worker",
    })),
  };
}

// Claim a Run. A new id for each claim: sent again with it (its answer was lost),
// the claim answers the Run it got rather than a second one (ADR-0114).
async function claimOne() {
  const clientClaimId = randomUUID();
  const body = { worker, bootId, leaseSeconds, waitSeconds, clientClaimId };
  try {
    return await post("claim", body, (waitSeconds + 30) * 1000);
  } catch (error) {
    // Its Run ended before a retry reached the server (a long outage): claim anew.
    if (error.title !== "ClaimIdUsed") throw error;
    say("claim-lost", { clientClaimId, error: error.message });
    return claimOne();
  }
}

async function runOne() {
  const claim = await claimOne();
  if (claim === null) return false;
  const { fence } = claim;
  inHand = fence;
  say("claimed", {
    fence,
    workItemId: claim.workItemId,
    actionType: claim.actionType,
    replayed: claim.replayed,
  });
  const lost = new AbortController();
  const stop = keepRenewing(fence, lost);
  try {
    const report = await execute(claim, lost.signal);
    const finished = await post("finish", { fence, report });
    say("finished", { runId: fence.runId, outcome: finished.outcome, replayed: finished.replayed });
  } catch (error) {
    if (lost.signal.aborted) return true; // the Run is someone else's now
    say("error", { runId: fence.runId, error: String(error.message ?? error) });
    try {
      await post("interrupt", { fence, reason: `worker error: ${error.message ?? error}`.slice(0, 500) });
    } catch {}
  } finally {
    stop();
    inHand = null;
  }
  return true;
}

async function shutdown(code) {
  const fence = inHand;
  if (fence) {
    try {
      await post("interrupt", { fence, reason: "worker stopped", progress: { summary: "stopped by a signal" } });
      say("interrupted", { runId: fence.runId });
    } catch {}
  }
  process.exit(code);
}

process.on("SIGTERM", () => shutdown(143));
process.on("SIGINT", () => shutdown(130));

let runs = 0;
say("started", { url: base });
try {
  while (runs < maxRuns) {
    const ran = await runOne();
    if (ran) runs++;
    else if (options["exit-when-idle"]) break;
  }
} catch (error) {
  // A refused claim (a bad option, a wrong token) or a server out of reach.
  say("failed", { error: String(error.message ?? error) });
  process.exit(1);
}
say("stopped", { runs });
