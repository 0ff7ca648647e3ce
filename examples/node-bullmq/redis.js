'use strict';
// BullMQ's connection options (ioredis) from a redis:// URL.
function redisOptions(url) {
  const parsed = new URL(url);
  const db = parsed.pathname.replace('/', '');
  return {
    host: parsed.hostname || '127.0.0.1',
    port: Number(parsed.port || 6379),
    db: db ? Number(db) : 0,
    maxRetriesPerRequest: null, // a BullMQ worker blocks on Redis; it must not give up
  };
}

module.exports = { redisOptions };
