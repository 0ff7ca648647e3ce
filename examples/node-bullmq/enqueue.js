'use strict';
// node enqueue.js NAME JOB_ID [ATTEMPTS [BACKOFF_MS]]: add a job to the example's queue.
const { Queue } = require('bullmq');
const { redisOptions } = require('./redis');

async function main() {
  const [name, jobId, attempts = '1', backoff = '0'] = process.argv.slice(2);
  const queue = new Queue(process.env.QUEUE || 'render', {
    connection: redisOptions(process.env.REDIS_URL || 'redis://127.0.0.1:6379'),
  });
  await queue.add(name, {}, {
    jobId,
    attempts: Number(attempts),
    backoff: { type: 'fixed', delay: Number(backoff) },
    removeOnComplete: false,
  });
  await queue.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
