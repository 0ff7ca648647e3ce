'use strict';
// StartMarkerProcessor: a span processor that sends a *start marker* of every job and step span
// the moment the step starts, so `otel-jobsteps collect` shows running steps as RUNNING before
// the ended spans arrive (ended-span exporters only send a span once it is over).
//
// A marker is a copy of the span with `$span.partial = true` and its end time equal to its start
// (the convention collect accepts, with Logfire's pending spans and an end time of 0). A job span's
// marker, and those of any span between it and the step, are sent just before its first step's:
// by then the worker has set `job.attempt` on it (BullMQ only counts the attempt when the run is
// over).
//
// Markers go out through their own exporter, one small request each; the ended spans keep going
// through the usual BatchSpanProcessor.

const STEP_KEY = 'job.step.key';
const JOB_ID = 'job.id';
const BULLMQ_JOB_ID = 'bullmq.job.id';
const PARTIAL = '$span.partial';

function isJobSpan(span) {
  return JOB_ID in span.attributes || BULLMQ_JOB_ID in span.attributes;
}

function marker(span) {
  const context = span.spanContext();
  return {
    name: span.name,
    kind: span.kind,
    spanContext: () => context,
    parentSpanContext: span.parentSpanContext,
    startTime: span.startTime,
    endTime: span.startTime,
    status: { code: 0 },
    attributes: { ...span.attributes, [PARTIAL]: true },
    links: [],
    events: [],
    duration: [0, 0],
    ended: true,
    resource: span.resource,
    instrumentationScope: span.instrumentationScope,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}

class StartMarkerProcessor {
  /** @param exporter an OTLP span exporter pointed at collect */
  constructor(exporter, { maxOpenSpans = 10000 } = {}) {
    this._exporter = exporter;
    this._maxOpenSpans = maxOpenSpans;
    this._open = new Map(); // span id -> span, while it runs (to find a step's job span)
    this._marked = new Set(); // job spans whose marker went out
    this._pending = new Set(); // exports in flight, for forceFlush
  }

  onStart(span) {
    const id = span.spanContext().spanId;
    if (this._open.size >= this._maxOpenSpans) {
      this._open.delete(this._open.keys().next().value);
    }
    this._open.set(id, span);
    if (!(STEP_KEY in span.attributes)) return;
    const chain = this._chainToJob(span);
    if (!chain) return; // not a step of a job: collect would ignore it
    // The job span and any span between it and the step, once each: collect needs the whole
    // chain to place the step in its job.
    const markers = [];
    for (const ancestor of chain) {
      const id = ancestor.spanContext().spanId;
      if (!this._marked.has(id)) {
        this._marked.add(id);
        markers.push(marker(ancestor));
      }
    }
    markers.push(marker(span));
    this._send(markers);
  }

  onEnd(span) {
    const id = span.spanContext().spanId;
    this._open.delete(id);
    this._marked.delete(id);
  }

  /** The open spans from the step's job span down to its parent, or undefined outside a job. */
  _chainToJob(span) {
    const chain = [];
    let parent = span.parentSpanContext && this._open.get(span.parentSpanContext.spanId);
    for (let depth = 0; parent && depth < 64; depth += 1) {
      chain.unshift(parent);
      if (isJobSpan(parent)) return chain;
      parent = parent.parentSpanContext && this._open.get(parent.parentSpanContext.spanId);
    }
    return undefined;
  }

  _send(spans) {
    const sent = new Promise((resolve) => {
      try {
        this._exporter.export(spans, () => resolve());
      } catch {
        resolve(); // a marker is best effort: the ended span follows anyway
      }
    });
    this._pending.add(sent);
    sent.then(() => this._pending.delete(sent));
  }

  async forceFlush() {
    await Promise.all([...this._pending]);
  }

  async shutdown() {
    await this.forceFlush();
    await this._exporter.shutdown();
  }
}

module.exports = { StartMarkerProcessor, PARTIAL };
