/*
 * The Redis lock most libraries implement: SET key token NX PX ttl, polled
 * every 10 ms or 1 ms while busy; released by a compare-and-delete script
 * (EVAL), so a holder whose TTL ran out never deletes the next holder's key.
 * target is the Redis server's Unix socket path.
 */
#include "bench.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char unlock_script[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

typedef struct redis_state {
    redisContext *rc;
    long poll_us;
    char token[64];
} redis_state;

static void *open_with(const char *socket_path, long poll_us)
{
    redis_state *s = malloc(sizeof *s);
    if (!s)
        bench_die("out of memory");
    s->rc = redisConnectUnix(socket_path);
    if (!s->rc || s->rc->err)
        bench_die("redis connect %s: %s", socket_path,
                  s->rc ? s->rc->errstr : "out of memory");
    s->poll_us = poll_us;
    /* Unique per holder: the unlock deletes only its own key. */
    snprintf(s->token, sizeof s->token, "%d-%lld", (int)getpid(),
             (long long)bench_now_ns());
    return s;
}

static void *open_10ms(const char *target)
{
    return open_with(target, 10000);
}
static void *open_1ms(const char *target)
{
    return open_with(target, 1000);
}

static void redis_lock(void *state, int64_t key, long *queries)
{
    redis_state *s = state;
    char name[32];
    snprintf(name, sizeof name, "lock:%lld", (long long)key);
    for (;;) {
        redisReply *r = redisCommand(s->rc, "SET %s %s NX PX %d", name,
                                     s->token, 30000);
        ++*queries;
        if (!r)
            bench_die("redis SET: %s", s->rc->errstr);
        int got = r->type == REDIS_REPLY_STATUS; /* "OK"; nil when taken */
        if (r->type == REDIS_REPLY_ERROR)
            bench_die("redis SET: %s", r->str);
        freeReplyObject(r);
        if (got)
            return;
        struct timespec ts = {0, s->poll_us * 1000};
        nanosleep(&ts, NULL);
    }
}

static void redis_unlock(void *state, int64_t key, long *queries)
{
    redis_state *s = state;
    char name[32];
    snprintf(name, sizeof name, "lock:%lld", (long long)key);
    redisReply *r = redisCommand(s->rc, "EVAL %s 1 %s %s", unlock_script, name,
                                 s->token);
    ++*queries;
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        bench_die("redis unlock failed: %s",
                  r ? (r->str ? r->str : "not held") : s->rc->errstr);
    freeReplyObject(r);
}

static void redis_close(void *state)
{
    redis_state *s = state;
    redisFree(s->rc);
    free(s);
}

const bench_locker bench_locker_redis_10ms = {
    "redis poll 10 ms",
    "Redis `SET NX PX` polled every 10 ms, `EVAL` compare-and-delete unlock",
    open_10ms,
    redis_lock,
    redis_unlock,
    redis_close,
    NULL};
const bench_locker bench_locker_redis_1ms = {
    "redis poll 1 ms",
    "Redis `SET NX PX` polled every 1 ms, `EVAL` compare-and-delete unlock",
    open_1ms,
    redis_lock,
    redis_unlock,
    redis_close,
    NULL};
