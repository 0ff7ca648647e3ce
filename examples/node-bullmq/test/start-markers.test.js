'use strict';
// node --test: the start-marker processor, on the real SDK with an in-memory exporter.
const test = require('node:test');
const assert = require('node:assert/strict');
const { context, trace } = require('@opentelemetry/api');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } = require('@opentelemetry/sdk-trace');
const { StartMarkerProcessor, PARTIAL } = require('../start-markers');

context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

test('a step start sends its job span marker once, then its own', async () => {
  const markers = new InMemorySpanExporter();
  const ended = new InMemorySpanExporter();
  const provider = new TracerProvider({
    spanProcessors: [new StartMarkerProcessor(markers), new SimpleSpanProcessor({ exporter: ended })],
  });
  const tracer = provider.getTracer('test');
  await tracer.startActiveSpan('process render', { attributes: { 'bullmq.job.id': '1' } }, async (job) => {
    job.setAttribute('job.attempt', 1);
    assert.equal(markers.getFinishedSpans().length, 0, 'no marker before a step starts');
    for (const key of ['RENDER', 'SAVE']) {
      await tracer.startActiveSpan(key, { attributes: { 'job.step.key': key } }, async (step) => {
        tracer.startSpan('not a step').end();
        step.end();
      });
    }
    job.end();
  });
  await provider.forceFlush();
  const sent = markers.getFinishedSpans();
  assert.deepEqual(sent.map((s) => s.name), ['process render', 'RENDER', 'SAVE']);
  for (const span of sent) {
    assert.equal(span.attributes[PARTIAL], true);
    assert.deepEqual(span.endTime, span.startTime);
  }
  assert.equal(sent[0].attributes['job.attempt'], 1, 'the job marker carries what was set');
  assert.equal(sent[1].parentSpanContext.spanId, sent[0].spanContext().spanId);
  assert.equal(ended.getFinishedSpans().length, 5, 'the ended spans are untouched');
  await provider.shutdown();
});

test('a step under a plain span sends the chain from its job span', async () => {
  const markers = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new StartMarkerProcessor(markers)] });
  const tracer = provider.getTracer('test');
  await tracer.startActiveSpan('job', { attributes: { 'job.id': '1' } }, async (job) => {
    await tracer.startActiveSpan('plain', async (plain) => {
      tracer.startSpan('SAVE', { attributes: { 'job.step.key': 'SAVE' } }).end();
      plain.end();
    });
    job.end();
  });
  await provider.forceFlush();
  assert.deepEqual(markers.getFinishedSpans().map((s) => s.name), ['job', 'plain', 'SAVE']);
  await provider.shutdown();
});

test('spans outside a job send no marker', async () => {
  const markers = new InMemorySpanExporter();
  const provider = new TracerProvider({ spanProcessors: [new StartMarkerProcessor(markers)] });
  const tracer = provider.getTracer('test');
  tracer.startSpan('plain', { attributes: { 'job.step.key': 'X' } }).end();
  await provider.forceFlush();
  assert.deepEqual(markers.getFinishedSpans(), []);
  await provider.shutdown();
});
