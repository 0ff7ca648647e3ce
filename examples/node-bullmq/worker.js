'use strict';
// A BullMQ worker whose spans and log lines feed otel_jobsteps through `otel-jobsteps collect`:
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces node worker.js
// BullMQ's own telemetry (bullmq-otel) makes the job span; the steps are plain spans with a
// `job.step.key` attribute. The `flaky` job fails in SAVE on its first attempt and is retried.
// Its log lines go through the OpenTelemetry Logs API: emitted inside a step, they carry the
// step's span context and become LOG rows under that step (OTEL_EXPORTER_OTLP_LOGS_ENDPOINT,
// default http://127.0.0.1:4318/v1/logs).
//
// Environment: REDIS_URL (redis://127.0.0.1:6379), QUEUE (render), HOLD_FILE (the `slow` job
// waits in RENDER until this file exists: a test watches the running step meanwhile).

const fs = require('node:fs/promises');
const { context, trace, SpanStatusCode } = require('@opentelemetry/api');
const { logs, SeverityNumber } = require('@opentelemetry/api-logs');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { OTLPLogExporter } = require('@opentelemetry/exporter-logs-otlp-proto');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-proto');
const { BatchLogRecordProcessor, LoggerProvider } = require('@opentelemetry/sdk-logs');
const { BatchSpanProcessor, TracerProvider } = require('@opentelemetry/sdk-trace');
const { Worker } = require('bullmq');
const { BullMQOtel } = require('bullmq-otel');
const { StartMarkerProcessor } = require('./start-markers');
const { redisOptions } = require('./redis');

const url = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || 'http://127.0.0.1:4318/v1/traces';
const logsUrl = process.env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT || 'http://127.0.0.1:4318/v1/logs';

// The three lines that feed the tables: an OTLP exporter pointed at collect, batched as usual,
// plus start markers so running steps show up live.
const provider = new TracerProvider({
  spanProcessors: [
    new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url }), scheduledDelayMillis: 200 }),
    new StartMarkerProcessor(new OTLPTraceExporter({ url })),
  ],
});
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(provider);
const tracer = trace.getTracer('otel-jobsteps-example');

// Log lines: the Logs SDK with the OTLP log exporter, batched like the spans. A record takes the
// active span's context when emitted, which is how collect finds its job and step.
const loggerProvider = new LoggerProvider({
  processors: [
    new BatchLogRecordProcessor({
      exporter: new OTLPLogExporter({ url: logsUrl }),
      scheduledDelayMillis: 200,
    }),
  ],
});
logs.setGlobalLoggerProvider(loggerProvider);
const logger = logs.getLogger('otel-jobsteps-example');

/** One log line of the current context (a step's, inside `step`). */
function log(severityNumber, severityText, body, attributes = {}) {
  logger.emit({ severityNumber, severityText, body, attributes });
}

/** Run `work` as the step `key` of the current job: a span with `job.step.key`. */
async function step(key, work) {
  return tracer.startActiveSpan(key.toLowerCase(), { attributes: { 'job.step.key': key } }, async (span) => {
    try {
      return await work(span);
    } catch (error) {
      span.recordException(error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
      throw error;
    } finally {
      span.end();
    }
  });
}

/** A progress snapshot of the current step: a span event whose attributes are the detail. */
function progress(span, detail) {
  span.addEvent('progress', detail);
}

async function waitForFile(path) {
  for (;;) {
    try {
      await fs.access(path);
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

const jobs = {
  async flaky(job) {
    log(SeverityNumber.INFO, 'INFO', `attempt ${job.attemptsMade + 1} of ${job.id}`);
    await step('RENDER', async (span) => {
      log(SeverityNumber.INFO, 'INFO', 'rendering 3 frames', { frames: 3 });
      log(SeverityNumber.DEBUG, 'DEBUG', 'frame cache warm'); // below INFO: not written
      // The frames take a few milliseconds. Node's SDK starts spans on Date.now()'s whole
      // millisecond: two steps starting in one millisecond would be ordered by their ends.
      await new Promise((resolve) => setTimeout(resolve, 3));
      progress(span, { pct: 100 });
    });
    await step('SAVE', async () => {
      if (job.attemptsMade === 0) {
        log(SeverityNumber.ERROR, 'ERROR', 'disk full while saving', { disk: '/data' });
        throw new Error('disk full');
      }
      log(SeverityNumber.INFO, 'INFO', 'saved');
    });
    return 'saved';
  },
  async slow() {
    await step('RENDER', async (span) => {
      progress(span, { pct: 10 });
      await waitForFile(process.env.HOLD_FILE);
    });
    await step('SAVE', async () => {});
    return 'saved';
  },
};

async function processJob(job) {
  // BullMQ counts the attempt only when the run is over; the start markers need it now.
  trace.getActiveSpan()?.setAttribute('job.attempt', job.attemptsMade + 1);
  return jobs[job.name](job);
}

const worker = new Worker(process.env.QUEUE || 'render', processJob, {
  connection: redisOptions(process.env.REDIS_URL || 'redis://127.0.0.1:6379'),
  telemetry: new BullMQOtel('otel-jobsteps-example'),
});

worker.on('ready', () => console.log('worker ready'));

async function stop() {
  await worker.close();
  await provider.shutdown(); // exports what is still batched
  await loggerProvider.shutdown();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
