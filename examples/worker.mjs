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
// its progress so far, then exits 143 or 130. A request that fails on the way
// (the network, a timeout, a proxy's 502 or 504 page, a 503, an answer cut
// short) is sent again as it was, 0.1 s after, doubling to 5 s between tries:
// a claim carries an id of its own (clientClaimId), and it, renew, finish,
// reserve and settle are recognised when repeated, so a retry never counts
// twice. A Run's verbs are tried until its lease ends (after that it is no
// longer this worker's); a claim is tried for as long as the server is away.
// An outage is said once as it begins ("unreachable") and once as it ends.

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
const FIRST_DELAY_MS = 100;
const MAX_DELAY_MS = 5_000;

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

function urlRefusal(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return "--url is not a URL (http://host:port)";
  }
  if (!["http:", "https:"].includes(parsed.protocol)) return "--url must be http:// or https://";
  if (parsed.username || parsed.password) {
    return "--url carries credentials, which are not sent: give the token with WORKCENTER_WORKER_TOKEN (or --token)";
  }
  return null;
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

// Resolves after `ms`, or at once when `signal` aborts; its listener goes with it (one
// left behind per renewal would add up over a long Run).
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });

// A failure on the way, not the server's answer: worth sending the same request again.
class Transient extends Error {}

// One try of a verb: the server's answer, a Problem it answered, or Transient.
async function once(verb, body, timeoutMs) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  let response;
  let text;
  try {
    response = await fetch(`${base}/api/worker/${verb}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await response.text(); // read here: a body cut short is a failure on the way
  } catch (error) {
    throw new Transient(`${verb}: ${error.cause?.code ?? error.message}`);
  }
  if (response.status === 204) return null;
  let answer;
  try {
    answer = JSON.parse(text);
  } catch {}
  if (response.ok && answer !== undefined) return answer;
  // 502 and 504 come from a proxy, 503 from a server held up; a page that is not a
  // problem document is not the server's answer either.
  if ([502, 503, 504].includes(response.status) || typeof answer?.title !== "string") {
    throw new Transient(`${verb}: ${response.status} ${answer?.title ?? "(not the server's answer)"}`);
  }
  throw new Problem(response.status, answer);
}

let awaySince = null; // when the server stopped answering, while it does not

// POST a verb until it is answered, sending it again as it was after a failure on the
// way, or until the time `within.until` (ms) has passed: then the last failure is
// thrown. `within` may be a Run, whose `until` is its lease's end as renewals move it.
async function post(verb, body, within = {}) {
  for (let delay = FIRST_DELAY_MS; ; delay = Math.min(2 * delay, MAX_DELAY_MS)) {
    // No try outlives `until` (a server that stopped answering held a stop's interrupt
    // for the whole 30 s, past a 5 s deadline).
    const left = (within.until ?? Infinity) - Date.now();
    const timeoutMs = Math.max(1, Math.min(within.timeoutMs ?? 30_000, left));
    try {
      const answer = await once(verb, body, timeoutMs);
      reachable();
      return answer;
    } catch (error) {
      if (!(error instanceof Transient)) {
        reachable();
        throw error;
      }
      if (awaySince === null) {
        awaySince = Date.now();
        say("unreachable", { verb, error: error.message, retrying: "0.1 s, doubling to 5 s" });
      }
      if (Date.now() + delay > (within.until ?? Infinity)) throw error;
      await sleep(delay);
    }
  }
}

function reachable() {
  if (awaySince === null) return;
  say("reachable", { afterSeconds: Math.round((Date.now() - awaySince) / 100) / 10 });
  awaySince = null;
}

// Renew the lease every third of it until stopped, each renewal tried until the lease
// ends; a refused or unreachable renewal means the Run is no longer ours: stop working
// on it. `run.until` follows the lease (from when each renewal was sent).
function keepRenewing(run) {
  const stopped = new AbortController();
  (async () => {
    while (true) {
      await sleep((leaseSeconds * 1000) / 3, stopped.signal);
      if (stopped.signal.aborted) return;
      const sent = Date.now();
      try {
        await post("renew", { fence: run.fence, leaseSeconds }, { until: run.until });
      } catch (error) {
        // A renewal refused because the finish in flight ended the Run is no loss.
        if (stopped.signal.aborted || run.finishing) return;
        say("lost", {
          runId: run.fence.runId,
          verb: "renew",
          error: String(error.message ?? error),
          then: "stopped working on it: its Action is claimed again once its lease ends",
        });
        run.lost.abort();
        return;
      }
      if (stopped.signal.aborted) return;
      run.until = sent + leaseSeconds * 1000;
      say("renewed", { runId: run.fence.runId });
    }
  })();
  return () => stopped.abort();
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

async function meteredCall(run, n, request) {
  const { fence } = run;
  const requestId = `${fence.runId}:${n}`;
  const admission = await post("requests/reserve", { fence, requestId, request }, run);
  if (!admission.allowed) {
    const error = new Error(`the budget refused the request: ${admission.code}`);
    error.code = admission.code;
    throw error;
  }
  let usage = null;
  let complete = false;
  try {
    const reply = await callModel(request, run.lost.signal);
    usage = reply.usage;
    complete = true;
    return reply;
  } finally {
    // A settlement that does not get through leaves the request charged at its
    // estimate; the model's reply is kept either way.
    try {
      await post("requests/settle", { fence, requestId, usage, complete }, run);
    } catch (error) {
      say("unsettled", {
        runId: fence.runId,
        requestId,
        error: String(error.message ?? error),
        then: "the request stays charged at its estimate",
      });
    }
  }
}

async function execute(claim, run) {
  const { fence } = run;
  const queued = await post("input", { fence }, run);
  const notes = [...claim.inputs, ...queued.inputs].map((i) => i.text);
  if (queued.inputs.length) {
    await post("input/consume", { fence, inputIds: queued.inputs.map((i) => i.id) }, run);
  }
  const request = {
    messages: [
      { role: "system", content: `You run a ${claim.actionType} Action.` },
      { role: "user", content: [claim.brief.objective, ...notes].join("\n") },
    ],
    max_tokens: 256,
  };
  try {
    await meteredCall(run, 1, request);
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
    return await post("claim", body, { timeoutMs: (waitSeconds + 30) * 1000 });
  } catch (error) {
    // Its Run ended before a retry reached the server (a long outage): claim anew.
    if (error.title !== "ClaimIdUsed") throw error;
    say("claim-lost", { clientClaimId, error: error.message });
    return claimOne();
  }
}

// What became of the Runs this worker claimed, said when it stops.
const tally = { runs: 0, finished: 0, unfinished: 0 };

async function runOne() {
  const claim = await claimOne();
  if (claim === null) return false;
  const { fence } = claim;
  // The Run's lease as this worker knows it: its verbs are tried until it ends.
  const run = { fence, until: Date.now() + leaseSeconds * 1000, lost: new AbortController() };
  inHand = fence;
  say("claimed", {
    fence,
    workItemId: claim.workItemId,
    actionType: claim.actionType,
    replayed: claim.replayed,
  });
  const stop = keepRenewing(run);
  try {
    const report = await execute(claim, run);
    run.finishing = true;
    const finished = await post("finish", { fence, report }, run);
    tally.finished++;
    say("finished", { runId: fence.runId, outcome: finished.outcome, replayed: finished.replayed });
  } catch (error) {
    tally.unfinished++;
    if (run.lost.signal.aborted) return true; // the Run is someone else's now: said by "lost"
    const unreached = error instanceof Transient;
    say("error", {
      runId: fence.runId,
      error: String(error.message ?? error),
      then: unreached
        ? "the server was not reached before the lease ended: the Action is claimed again"
        : "giving the Run up (interrupt)",
    });
    if (!unreached) {
      try {
        const reason = `worker error: ${error.message ?? error}`.slice(0, 500);
        await post("interrupt", { fence, reason }, { until: Date.now() + 10_000 });
      } catch {}
    }
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
      const progress = { summary: "stopped by a signal" };
      const within = { until: Date.now() + 5_000 };
      await post("interrupt", { fence, reason: "worker stopped", progress }, within);
      say("interrupted", { runId: fence.runId });
    } catch {}
    tally.unfinished++;
  }
  say("stopped", { ...tally, signal: code === 143 ? "SIGTERM" : "SIGINT" });
  process.exit(code);
}

process.on("SIGTERM", () => shutdown(143));
process.on("SIGINT", () => shutdown(130));

// A URL fetch cannot send is refused here, not retried as a failure on the way; its
// credentials are never printed (found by acceptance testing, ADR-0140).
const refusal = urlRefusal(base);
if (refusal) {
  say("failed", { error: refusal });
  process.exit(1);
}
say("started", { url: base });
try {
  while (tally.runs < maxRuns) {
    const ran = await runOne();
    if (ran) tally.runs++;
    else if (options["exit-when-idle"]) break;
  }
} catch (error) {
  // A refused claim: a bad option or a wrong token.
  say("failed", { error: String(error.message ?? error) });
  process.exit(1);
}
say("stopped", tally);
