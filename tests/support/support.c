/* support.c — see support.h. */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

const char *pt_env_or_skip(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0') {
        fprintf(stderr,
                "# skip: %s is unset (run through tests/run.sh, or the "
                "harness was pointed at PGLOCK_TEST_SERVER)\n",
                var);
        skip();
    }
    return v;
}

PGconn *pt_connect(const char *conninfo)
{
    PGconn *conn = PQconnectdb(conninfo);
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
        fail_msg("could not connect to \"%s\": %s", conninfo,
                 conn ? PQerrorMessage(conn) : "out of memory");
    return conn;
}

static PGresult *exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
        PQclear(res);
        fail_msg("query failed: %s: %s", sql, msg);
    }
    return res;
}

void pt_exec_ok(PGconn *conn, const char *sql)
{
    PQclear(exec_ok(conn, sql));
}

long pt_query_int(PGconn *conn, const char *sql)
{
    PGresult *res = exec_ok(conn, sql);
    long v = 0;
    if (PQntuples(res) > 0 && PQnfields(res) > 0 && !PQgetisnull(res, 0, 0)) {
        const char *s = PQgetvalue(res, 0, 0);
        v = strcmp(s, "t") == 0   ? 1
            : strcmp(s, "f") == 0 ? 0
                                  : strtol(s, NULL, 10);
    }
    PQclear(res);
    return v;
}

long pt_query_intf(PGconn *conn, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return pt_query_int(conn, sql);
}

void pt_execf(PGconn *conn, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    pt_exec_ok(conn, sql);
}

pglock_client *pt_open_client(const char *conninfo, const pglock_options *opts)
{
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, conninfo, opts);
    if (rc != 0)
        fail_msg("open: %s: %s", pglock_strerror(rc), pglock_client_error(c));
    return c;
}

pglock_options pt_lease_options(long lease_ms)
{
    pglock_options o;
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    o.lease_ms = lease_ms;
    return o;
}

pglock_client *pt_client_taking(const char *conninfo,
                                const pglock_options *opts, int64_t id)
{
    pglock_client *c = pt_open_client(conninfo, opts);
    pglock_key k;
    pglock_key_int64(&k, id);
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY);
    if (rc != 0)
        fail_msg("lock %lld: %s: %s", (long long)id, pglock_strerror(rc),
                 pglock_client_error(c));
    return c;
}

void pt_hold_start(pglock_hold **hold, pglock_client *c,
                   pglock_hold_drive drive, pglock_hold_lost_fn on_lost,
                   void *arg)
{
    pglock_hold_options ho;
    assert_int_equal(pglock_hold_options_init(&ho, PGLOCK_HOLD_OPTIONS_VERSION),
                     0);
    ho.drive = drive;
    ho.on_lost = on_lost;
    ho.arg = arg;
    int rc = pglock_hold_start(hold, c, &ho);
    if (rc != 0)
        fail_msg("hold: %s: %s", pglock_strerror(rc), pglock_client_error(c));
}

pglock_client *pt_client_holding(const char *conninfo,
                                 const pglock_options *opts, pglock_key *k,
                                 int64_t *id, int *pid)
{
    int64_t key = pt_unique_key();
    pglock_client *c = pt_client_taking(conninfo, opts, key);
    if (k)
        pglock_key_int64(k, key);
    if (id)
        *id = key;
    if (pid)
        *pid = pglock_client_backend_pid(c);
    return c;
}

static void *waiter_main(void *arg)
{
    pt_waiter *w = arg;
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)",
             (long long)w->key);
    PGresult *r = PQexec(w->conn, sql);
    w->got_at = pglock_now_ms();
    PQclear(r);
    w->done = 1;
    return NULL;
}

static int waiter_done(void *arg)
{
    return ((pt_waiter *)arg)->done;
}

void pt_waiter_start(pt_waiter *w, const char *conninfo, PGconn *observer,
                     int64_t key)
{
    *w = (pt_waiter){.conn = pt_connect(conninfo), .key = key};
    if (pthread_create(&w->thread, NULL, waiter_main, w) != 0)
        fail_msg("pthread_create failed");
    if (!pt_wait_backend_waiting(observer, PQbackendPID(w->conn), 10000))
        fail_msg("the second holder (backend %d) is not waiting for %lld",
                 PQbackendPID(w->conn), (long long)key);
}

int pt_waiter_granted(pt_waiter *w, long timeout_ms)
{
    if (!pt_wait_until(waiter_done, w, timeout_ms))
        return 0;
    pthread_join(w->thread, NULL);
    return 1;
}

PGconn *pt_connect_holding(const char *conninfo, int64_t key)
{
    PGconn *conn = pt_connect(conninfo);
    pt_execf(conn, "select pg_advisory_lock(%lld)", (long long)key);
    return conn;
}

int64_t pt_unique_key(void)
{
    static int n;
    return ((int64_t)getpid() << 20) + 7000 + (++n);
}

int pt_key_free(PGconn *observer, int64_t key)
{
    int got = (int)pt_query_intf(observer, "select pg_try_advisory_lock(%lld)",
                                 (long long)key);
    if (got)
        pt_execf(observer, "select pg_advisory_unlock(%lld)", (long long)key);
    return got;
}

int pt_key_shared_free(PGconn *observer, int64_t key)
{
    int got = (int)pt_query_intf(observer,
                                 "select pg_try_advisory_lock_shared(%lld)",
                                 (long long)key);
    if (got)
        pt_execf(observer, "select pg_advisory_unlock_shared(%lld)",
                 (long long)key);
    return got;
}

void pt_cancel_storm(const char *conninfo, int pid, long ms)
{
    PGconn *conn = pt_connect(conninfo);
    pt_execf(conn,
             "DO $$ BEGIN WHILE clock_timestamp() < statement_timestamp() + "
             "interval '%ld ms' LOOP EXIT WHEN NOT pg_cancel_backend(%d); "
             "END LOOP; END $$",
             ms, pid);
    PQfinish(conn);
}

int pt_backend_holds_no_xid(PGconn *observer, int pid)
{
    return pt_query_intf(observer,
                         "SELECT count(*) FROM pg_stat_activity WHERE pid = %d"
                         " AND backend_xid IS NULL AND backend_xmin IS NULL",
                         pid) == 1;
}

long pt_logged(int pid, const char *text)
{
    char path[4096], tag[32], line[2048];
    snprintf(path, sizeof path, "%s/primary.log",
             pt_env_or_skip("PGLOCK_TEST_DIR"));
    snprintf(tag, sizeof tag, "[%d] ", pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    long n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, tag) && strstr(line, text))
            n++;
    fclose(f);
    return n;
}

long pt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pt_wait_until(int (*cond)(void *arg), void *arg, long timeout_ms)
{
    long deadline = pt_now_ms() + timeout_ms;
    for (;;) {
        if (cond(arg))
            return 1;
        if (pt_now_ms() >= deadline)
            return 0;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

struct bounded_call {
    void (*call)(void *arg);
    void *arg;
    volatile int returned;
};

static void *bounded_call_main(void *arg)
{
    struct bounded_call *b = arg;
    b->call(b->arg);
    b->returned = 1;
    return NULL;
}

static int bounded_call_returned(void *arg)
{
    return ((struct bounded_call *)arg)->returned;
}

long pt_call_on_cut_network(void (*call)(void *arg), void *arg, long timeout_ms)
{
    struct bounded_call b = {.call = call, .arg = arg};
    long t0 = pt_now_ms();
    pthread_t t;
    if (pthread_create(&t, NULL, bounded_call_main, &b) != 0)
        fail_msg("pthread_create failed");
    int returned = pt_wait_until(bounded_call_returned, &b, timeout_ms);
    long took = pt_now_ms() - t0;
    pt_proxy_heal();
    pthread_join(t, NULL);
    return returned ? took : -1;
}

/* A backend seen from an observer, for pt_wait_until conditions. */
struct backend_arg {
    PGconn *observer;
    int pid;
};

int pt_backend_waiting_on_advisory(PGconn *observer, int pid)
{
    return pt_query_intf(observer,
                         "select count(*) from pg_locks where "
                         "locktype = 'advisory' and not granted and pid = %d",
                         pid) > 0;
}

static int waiting_cond(void *p)
{
    struct backend_arg *a = p;
    return pt_backend_waiting_on_advisory(a->observer, a->pid);
}

int pt_wait_backend_waiting(PGconn *observer, int pid, long timeout_ms)
{
    struct backend_arg a = {observer, pid};
    return pt_wait_until(waiting_cond, &a, timeout_ms);
}

long pt_backend_advisory_granted(PGconn *observer, int pid)
{
    return pt_query_intf(observer,
                         "select count(*) from pg_locks where "
                         "locktype = 'advisory' and granted and pid = %d",
                         pid);
}

static int gone_cond(void *p)
{
    struct backend_arg *a = p;
    return pt_query_intf(a->observer,
                         "select count(*) from pg_stat_activity"
                         " where pid = %d",
                         a->pid) == 0;
}

int pt_wait_backend_gone(PGconn *observer, int pid, long timeout_ms)
{
    struct backend_arg a = {observer, pid};
    return pt_wait_until(gone_cond, &a, timeout_ms);
}

long pt_count_advisory(PGconn *observer, const char *where)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "select count(*) from pg_locks where locktype = 'advisory'%s%s%s",
             where ? " and (" : "", where ? where : "", where ? ")" : "");
    return pt_query_int(observer, sql);
}

/* The namespace of the filler's pair keys ("PLK"), apart from any key a
 * test takes. */
#define FILL_NS 5262411

void pt_lock_table_fill(PGconn *filler)
{
    char sql[200];
    /* In the select list the series is produced row by row (in FROM it
     * would be built whole first). */
    snprintf(sql, sizeof sql,
             "select pg_advisory_lock(%d,"
             " generate_series(1, 100000000))",
             FILL_NS);
    PGresult *res = PQexec(filler, sql);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    char got[8];
    snprintf(got, sizeof got, "%s", state ? state : "none");
    PQclear(res);
    if (strcmp(got, "53200") != 0)
        fail_msg("filling the lock table ended with SQLSTATE %s, not 53200",
                 got);
    if (pt_query_intf(filler,
                      "select count(*) from pg_locks where locktype ="
                      " 'advisory' and classid = %d and granted",
                      FILL_NS) < 1)
        fail_msg("the filler holds no lock after filling the lock table");
}

void pt_lock_table_release(PGconn *filler)
{
    pt_exec_ok(filler, "select pg_advisory_unlock_all()");
}

int pt_proxy_command(const char *cmd, char *reply, size_t len)
{
    const char *path = pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (len == 0)
        return -1;
    reply[0] = '\0';
    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* The proxy answers at once; a stuck proxy must not hang the test. */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < len - 1) {
        ssize_t r = recv(fd, reply + got, len - 1 - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (memchr(reply, '\n', got))
            break;
    }
    close(fd);
    reply[got] = '\0';
    char *nl = strchr(reply, '\n');
    if (nl == NULL)
        return -1;
    *nl = '\0';
    return 0;
}

static void proxy_ok(const char *cmd)
{
    char reply[128];
    if (pt_proxy_command(cmd, reply, sizeof reply) != 0 ||
        strcmp(reply, "ok") != 0)
        fail_msg("proxy command %s failed: %s", cmd, reply);
}

void pt_proxy_cut(void)
{
    proxy_ok("cut");
}
void pt_proxy_heal(void)
{
    proxy_ok("heal");
}
void pt_proxy_reset(void)
{
    proxy_ok("reset");
}

static void proxy_counts(long *messages, long *roundtrips)
{
    char reply[128];
    if (pt_proxy_command("count", reply, sizeof reply) != 0 ||
        sscanf(reply, "messages=%ld roundtrips=%ld", messages, roundtrips) != 2)
        fail_msg("proxy command count failed: %s", reply);
}

long pt_proxy_roundtrips(void)
{
    long m, r;
    proxy_counts(&m, &r);
    return r;
}

long pt_proxy_messages(void)
{
    long m, r;
    proxy_counts(&m, &r);
    return m;
}

void pt_harness(const char *action)
{
    const char *harness = pt_env_or_skip("PGLOCK_TEST_HARNESS");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s", harness, action);
    int rc = system(cmd);
    if (rc != 0)
        fail_msg("%s failed (status %d)", cmd, rc);
}

long pt_cancel_statements(const char *conninfo, int pid, int count, int bound_s)
{
    const char *harness = pt_env_or_skip("PGLOCK_TEST_HARNESS");
    const char *slash = strrchr(harness, '/');
    int dir_len = slash ? (int)(slash - harness) : 1;
    char cmd[8192];
    /* (harness.sh is in tests/harness/, the script in tests/support/;
     * conninfo strings of the harness hold no single quote) */
    snprintf(cmd, sizeof cmd,
             "'%.*s/../support/cancel_statements.sh' '%s' %d %d %d", dir_len,
             slash ? harness : ".", conninfo, pid, count, bound_s);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    long n = -1;
    if (fscanf(p, "%ld", &n) != 1)
        n = -1;
    int rc = pclose(p);
    if (rc != 0)
        fail_msg("%s failed (status %d)", cmd, rc);
    return n;
}

void pt_partition_cut(void)
{
    pt_env_or_skip("PGLOCK_TEST_PARTITION_NETNS");
    pt_harness("partition-cut");
}

void pt_partition_heal(void)
{
    pt_env_or_skip("PGLOCK_TEST_PARTITION_NETNS");
    pt_harness("partition-heal");
}

/* The calling thread's own network namespace, kept while it is away. */
static __thread int home_netns = -1;

void pt_partition_enter(void)
{
    const char *ns = pt_env_or_skip("PGLOCK_TEST_PARTITION_NETNS");
    char path[256];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    if (home_netns < 0)
        home_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (home_netns < 0 || fd < 0)
        fail_msg("cannot open the network namespaces (%s): %s", path,
                 strerror(errno));
    int rc = setns(fd, CLONE_NEWNET);
    int err = errno;
    close(fd);
    if (rc != 0)
        fail_msg("setns(%s) failed: %s", path, strerror(err));
}

void pt_partition_leave(void)
{
    if (home_netns < 0)
        return;
    if (setns(home_netns, CLONE_NEWNET) != 0)
        fail_msg("setns back home failed: %s", strerror(errno));
    close(home_netns);
    home_netns = -1;
}

typedef struct key_watch {
    PGconn *observer;
    int64_t key;
} key_watch;

static int key_is_free(void *arg)
{
    key_watch *w = arg;
    return pt_key_free(w->observer, w->key);
}

int pt_wait_key_free(PGconn *observer, int64_t key, long timeout_ms)
{
    key_watch w = {observer, key};
    return pt_wait_until(key_is_free, &w, timeout_ms);
}
