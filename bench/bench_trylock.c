/*
 * bench_trylock — the floor for `pglock run --try KEY -- COMMAND`: the least
 * a libpq program can do: connect (PG* variables), pg_try_advisory_lock,
 * run COMMAND if given (fork, exec, wait), exit.  No settings, no checks,
 * no supervision: what pglock run does on top of this is its overhead.
 *
 *   bench_trylock [-d CONNINFO] KEY [COMMAND [ARG...]]
 * Exit: COMMAND's status, 75 when the lock is busy, 69 when connecting fails.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *conninfo = "";
    if (argc > 2 && strcmp(argv[1], "-d") == 0) {
        conninfo = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr,
                "usage: bench_trylock [-d CONNINFO] KEY [COMMAND [ARG...]]\n");
        return 64;
    }
    PGconn *conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "bench_trylock: %s", PQerrorMessage(conn));
        return 69;
    }
    const char *values[1] = {argv[1]};
    PGresult *res = PQexecParams(conn,
                                 "SELECT pg_try_advisory_lock($1::bigint)", 1,
                                 NULL, values, NULL, NULL, 0);
    int got = PQresultStatus(res) == PGRES_TUPLES_OK &&
              strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    int status = got ? 0 : 75;
    if (got && argc > 2) {
        pid_t pid = fork();
        if (pid == 0) {
            execvp(argv[2], argv + 2);
            _exit(127);
        }
        int st;
        status = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st)
                     ? WEXITSTATUS(st)
                     : 70;
    }
    if (got) {
        res = PQexec(conn, "SELECT pg_advisory_unlock_all()");
        PQclear(res);
    }
    PQfinish(conn);
    return status;
}
