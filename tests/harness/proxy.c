/*
 * pglock_test_proxy — a TCP proxy in front of the test primary that can
 * simulate a dead network and counts the frontend protocol messages that
 * pass through it.
 *
 *   pglock_test_proxy --listen PORT --target PORT --control PATH
 *                     [--port-file FILE] [--down-port-file FILE]
 *   pglock_test_proxy --control PATH --send COMMAND   (client: prints the
 *                     reply; for shell tests)
 *
 * Listens on 127.0.0.1:PORT (0 = any free port; the port actually bound is
 * written to FILE), forwards each connection to 127.0.0.1:TARGET.  The
 * control socket PATH (Unix, stream) takes one command per line:
 *
 *   cut    from now on every byte in either direction, on every current and
 *          new connection, is read and thrown away; nothing is closed (a
 *          dead network, not a closed one).  New connections are accepted
 *          but not connected upstream.  A side closed by its peer during
 *          the cut stays silent toward the other side.
 *   heal   forward again.  Bytes swallowed during the cut are gone, as
 *          packets are in a real partition; a connection that lost bytes
 *          can never be in sync again, so it is closed on both sides at the
 *          heal (as TCP resets a connection whose retransmissions ran out).
 *          Connections that lost nothing keep working; those accepted
 *          during the cut are connected upstream now.
 *   count  answers "messages=N roundtrips=M": frontend messages clients
 *          sent since the last reset (startup, SSLRequest and CancelRequest
 *          packets included) and how many of them were 'Q' or 'S' (one per
 *          round trip: a simple query, or an extended-protocol Sync).
 *   reset  zeroes the counters.
 *
 * --down-port-file reserves one more port on 127.0.0.1: bound, never
 * listened on, so connecting to it is refused at once and no other program
 * can take it while the proxy lives (the harness's "server down" address).
 *
 * Other commands answer "ok"; unknown ones "error unknown command".
 * Single-threaded, poll(), no TLS (the harness servers have ssl off).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CONNS 512
#define MAX_CTLS 16
#define BUF_SIZE 65536

/* Bytes waiting to be written to one fd. */
struct outbuf {
    char data[BUF_SIZE];
    size_t len, off;
};

/* Where we are in the client's stream of frontend messages. */
struct msgparser {
    bool typed; /* past the startup packet: type byte + length */
    unsigned char hdr[8];
    size_t hdrlen; /* header bytes collected so far */
    uint64_t skip; /* body bytes still to pass over */
};

struct conn {
    bool used;
    int client, server; /* -1 when closed / not connected */
    bool lost;          /* bytes were swallowed during a cut */
    struct outbuf to_server, to_client;
    struct msgparser parser;
};

struct ctl {
    int fd;
    char line[256];
    size_t len;
};

static struct conn conns[MAX_CONNS];
static struct ctl ctls[MAX_CTLS];
static bool cut;
static long messages, roundtrips;
static int target_port;

static void die(const char *what)
{
    fprintf(stderr, "pglock_test_proxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        die("fcntl");
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Counts the messages in the next n bytes a client sent. */
static void parse_frontend(struct msgparser *p, const unsigned char *b,
                           size_t n)
{
    while (n > 0) {
        if (p->skip > 0) {
            size_t k = p->skip < n ? (size_t)p->skip : n;
            p->skip -= k;
            b += k;
            n -= k;
            continue;
        }
        /* Untyped packets: int32 length, int32 code.  Typed: byte, int32. */
        size_t need = p->typed ? 5 : 8;
        p->hdr[p->hdrlen++] = *b++;
        n--;
        if (p->hdrlen < need)
            continue;
        p->hdrlen = 0;
        messages++;
        if (p->typed) {
            uint32_t len = be32(p->hdr + 1);
            p->skip = len >= 4 ? len - 4 : 0;
            if (p->hdr[0] == 'Q' || p->hdr[0] == 'S')
                roundtrips++;
        } else {
            uint32_t len = be32(p->hdr), code = be32(p->hdr + 4);
            p->skip = len >= 8 ? len - 8 : 0;
            /* SSLRequest, GSSENCRequest and CancelRequest keep the stream
             * untyped; a startup packet ends that phase. */
            if (code != 80877103 && code != 80877104 && code != 80877102)
                p->typed = true;
        }
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void drop_conn(struct conn *c)
{
    close_fd(&c->client);
    close_fd(&c->server);
    c->used = false;
}

/* Connects c upstream; on failure the client is closed (as a refused
 * connection would be). */
static void connect_upstream(struct conn *c)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)target_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (fd >= 0)
            close(fd);
        drop_conn(c);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_nonblock(fd);
    c->server = fd;
}

static void accept_client(int lfd)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct conn *c = NULL;
    for (int i = 0; i < MAX_CONNS && !c; i++)
        if (!conns[i].used)
            c = &conns[i];
    if (!c) {
        close(fd);
        return;
    }
    memset(c, 0, sizeof *c);
    c->used = true;
    c->client = fd;
    c->server = -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!cut)
        connect_upstream(c);
}

/* Writes what is buffered for fd; returns false if the fd is dead. */
static bool flush(int fd, struct outbuf *o)
{
    while (o->off < o->len) {
        ssize_t w = send(fd, o->data + o->off, o->len - o->off, MSG_NOSIGNAL);
        if (w < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        o->off += (size_t)w;
    }
    o->len = o->off = 0;
    return true;
}

/* Reads from *from into out (or into nothing, during a cut); returns false
 * on EOF or error. */
static bool pump(struct conn *c, int from, struct outbuf *out, bool from_client)
{
    ssize_t r = recv(from, out->data, sizeof out->data, 0);
    if (r == 0)
        return false;
    if (r < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (from_client)
        parse_frontend(&c->parser, (unsigned char *)out->data, (size_t)r);
    if (cut) {
        c->lost = true;
        return true;
    }
    out->len = (size_t)r;
    out->off = 0;
    return true;
}

static void handle_conn_events(struct conn *c, short cev, short sev)
{
    bool client_ok = true, server_ok = true;

    if (c->client >= 0 && (cev & POLLOUT))
        client_ok = flush(c->client, &c->to_client);
    if (c->server >= 0 && (sev & POLLOUT))
        server_ok = flush(c->server, &c->to_server);
    if (c->client >= 0 && client_ok && (cev & (POLLIN | POLLHUP | POLLERR)))
        client_ok = pump(c, c->client, &c->to_server, true);
    if (c->server >= 0 && server_ok && (sev & (POLLIN | POLLHUP | POLLERR)))
        server_ok = pump(c, c->server, &c->to_client, false);
    /* Forward at once what was just read. */
    if (client_ok && server_ok && !cut) {
        if (c->server >= 0 && c->to_server.len)
            server_ok = flush(c->server, &c->to_server);
        if (c->client >= 0 && c->to_client.len)
            client_ok = flush(c->client, &c->to_client);
    }
    if (client_ok && server_ok)
        return;
    if (cut) {
        /* A dead network carries no FIN: close only the side that died. */
        if (!client_ok)
            close_fd(&c->client);
        if (!server_ok)
            close_fd(&c->server);
        c->lost = true;
        if (c->client < 0 && c->server < 0)
            c->used = false;
        return;
    }
    /* Pass on what is pending, best effort, then close both sides. */
    if (client_ok && c->client >= 0)
        flush(c->client, &c->to_client);
    if (server_ok && c->server >= 0)
        flush(c->server, &c->to_server);
    drop_conn(c);
}

static void heal(void)
{
    cut = false;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = &conns[i];
        if (!c->used)
            continue;
        if (c->lost || c->client < 0)
            drop_conn(c);
        else if (c->server < 0)
            connect_upstream(c);
    }
}

static const char *run_command(const char *cmd)
{
    static char reply[128];
    if (strcmp(cmd, "cut") == 0) {
        cut = true;
        for (int i = 0; i < MAX_CONNS; i++) {
            /* What was read but not yet written is lost as well. */
            struct conn *c = &conns[i];
            if (c->used && (c->to_server.len || c->to_client.len)) {
                c->lost = true;
                c->to_server.len = c->to_server.off = 0;
                c->to_client.len = c->to_client.off = 0;
            }
        }
        return "ok\n";
    }
    if (strcmp(cmd, "heal") == 0) {
        heal();
        return "ok\n";
    }
    if (strcmp(cmd, "reset") == 0) {
        messages = roundtrips = 0;
        return "ok\n";
    }
    if (strcmp(cmd, "count") == 0) {
        snprintf(reply, sizeof reply, "messages=%ld roundtrips=%ld\n", messages,
                 roundtrips);
        return reply;
    }
    return "error unknown command\n";
}

static void handle_ctl(struct ctl *k)
{
    ssize_t r = recv(k->fd, k->line + k->len, sizeof k->line - 1 - k->len, 0);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        close_fd(&k->fd);
        return;
    }
    k->len += (size_t)r;
    char *nl;
    while ((nl = memchr(k->line, '\n', k->len)) != NULL) {
        *nl = '\0';
        if (nl > k->line && nl[-1] == '\r')
            nl[-1] = '\0';
        const char *reply = run_command(k->line);
        /* Replies are tiny: a blocking-style best-effort send is enough. */
        if (send(k->fd, reply, strlen(reply), MSG_NOSIGNAL) < 0) {
            close_fd(&k->fd);
            return;
        }
        size_t used = (size_t)(nl - k->line) + 1;
        memmove(k->line, nl + 1, k->len - used);
        k->len -= used;
    }
    if (k->len == sizeof k->line - 1) /* a line too long: drop the client */
        close_fd(&k->fd);
}

/* Binds a TCP socket on 127.0.0.1:port; listens on it only if asked. */
static int bind_tcp(int port, int *bound, bool do_listen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("bind");
    if (do_listen && listen(fd, 128) < 0)
        die("listen");
    socklen_t sl = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        die("getsockname");
    *bound = ntohs(sa.sin_port);
    set_nonblock(fd);
    return fd;
}

static int listen_unix(const char *path)
{
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof su.sun_path) {
        fprintf(stderr, "pglock_test_proxy: control path too long\n");
        exit(1);
    }
    strcpy(su.sun_path, path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    if (bind(fd, (struct sockaddr *)&su, sizeof su) < 0)
        die("bind control socket");
    if (listen(fd, 16) < 0)
        die("listen");
    set_nonblock(fd);
    return fd;
}

/* Writes the port whole, then renames: a reader never sees half a number. */
static void write_port_file(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 ||
        rename(tmp, path) < 0)
        die("port file");
}

/* Client mode: sends one command to a running proxy, prints its reply. */
static int send_command(const char *path, const char *cmd)
{
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof su.sun_path)
        return 1;
    strcpy(su.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&su, sizeof su) < 0)
        die("connect to control socket");
    char line[256], reply[256];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (n < 0 || n >= (int)sizeof line || write(fd, line, (size_t)n) != n)
        die("send");
    size_t got = 0;
    while (got < sizeof reply - 1 && !memchr(reply, '\n', got)) {
        ssize_t r = read(fd, reply + got, sizeof reply - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    fwrite(reply, 1, got, stdout);
    return got > 0 && strncmp(reply, "error", 5) != 0 ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pglock_test_proxy --listen PORT --target PORT "
            "--control PATH [--port-file FILE] [--down-port-file FILE]\n"
            "       pglock_test_proxy --control PATH --send COMMAND\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int listen_port = -1;
    const char *control = NULL, *port_file = NULL, *down_port_file = NULL;
    const char *send_cmd = NULL;
    target_port = -1;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (strcmp(argv[i], "--listen") == 0)
            listen_port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--target") == 0)
            target_port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--control") == 0)
            control = argv[++i];
        else if (strcmp(argv[i], "--port-file") == 0)
            port_file = argv[++i];
        else if (strcmp(argv[i], "--send") == 0)
            send_cmd = argv[++i];
        else if (strcmp(argv[i], "--down-port-file") == 0)
            down_port_file = argv[++i];
        else
            usage();
    }
    if (send_cmd && control)
        return send_command(control, send_cmd);
    if (listen_port < 0 || listen_port > 65535 || target_port <= 0 ||
        target_port > 65535 || !control)
        usage();
    signal(SIGPIPE, SIG_IGN);

    int bound;
    int lfd = bind_tcp(listen_port, &bound, true);
    int cfd = listen_unix(control);
    for (int i = 0; i < MAX_CTLS; i++)
        ctls[i].fd = -1;
    if (down_port_file) {
        int down;
        bind_tcp(0, &down, false); /* kept open, never listened on */
        write_port_file(down_port_file, down);
    }
    /* Last: the port file says the proxy is ready. */
    if (port_file)
        write_port_file(port_file, bound);

    static struct pollfd pfd[2 + MAX_CTLS + 2 * MAX_CONNS];
    static int
        owner[2 + MAX_CTLS + 2 * MAX_CONNS]; /* index into conns / ctls */
    for (;;) {
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = cfd, .events = POLLIN};
        for (int i = 0; i < MAX_CTLS; i++)
            if (ctls[i].fd >= 0) {
                owner[n] = i;
                pfd[n++] = (struct pollfd){.fd = ctls[i].fd, .events = POLLIN};
            }
        int first_conn = n;
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = &conns[i];
            if (!c->used)
                continue;
            /* Read a side only when what it sent before has been written. */
            short cev = (c->to_server.len ? 0 : POLLIN) |
                        (c->to_client.len ? POLLOUT : 0);
            short sev = (c->to_client.len ? 0 : POLLIN) |
                        (c->to_server.len ? POLLOUT : 0);
            owner[n] = i;
            pfd[n++] = (struct pollfd){.fd = c->client, .events = cev};
            owner[n] = i;
            pfd[n++] = (struct pollfd){.fd = c->server, .events = sev};
        }
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        for (int j = first_conn; j < n; j += 2) {
            struct conn *c = &conns[owner[j]];
            short cev = pfd[j].fd >= 0 ? pfd[j].revents : 0;
            short sev = pfd[j + 1].fd >= 0 ? pfd[j + 1].revents : 0;
            if (c->used && (cev || sev) && pfd[j].fd == c->client &&
                pfd[j + 1].fd == c->server)
                handle_conn_events(c, cev, sev);
        }
        for (int j = 2; j < first_conn; j++)
            if (pfd[j].revents)
                handle_ctl(&ctls[owner[j]]);
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(cfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            int slot = -1;
            for (int i = 0; i < MAX_CTLS && fd >= 0 && slot < 0; i++)
                if (ctls[i].fd < 0)
                    slot = i;
            if (slot >= 0)
                ctls[slot] = (struct ctl){.fd = fd};
            else if (fd >= 0)
                close(fd);
        }
        if (pfd[0].revents & POLLIN)
            accept_client(lfd);
    }
}
