/* The least any process between an ACP client and its agent can cost: bench/relay.py's
 * byte relay without an interpreter. `relay [--db FILE] AGENT ARGV...` starts the agent and
 * copies its stdio to and from its own with poll(2) and read(2)/write(2), unparsed.
 *
 * With --db, durable first, as acpctl serve is: every newline-ended frame, either way, is
 * appended to a SQLite table (WAL, synchronous=FULL) in one transaction per read of a pipe,
 * and written on only after that transaction committed. Frames that arrive meanwhile wait
 * in the pipe and go in the next read's transaction (group commit by read). No parsing,
 * no interval: the floor of a durable-first relay on this disk.
 *
 * Built and used by `bench/serve_overhead.py --relays` when a C compiler and SQLite's
 * headers are present; not part of the product. */
#define _GNU_SOURCE /* memrchr */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF (1 << 20)

static sqlite3 *db;
static sqlite3_stmt *insert;
static long commits; /* the read's transaction number, stored with its frames */

struct pending { /* bytes read from one side that do not end a frame yet */
    char data[BUF];
    size_t len;
};

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void die_sql(const char *what) {
    fprintf(stderr, "relay: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

/* Append the complete frames among data[0..n) in one transaction; returns their length. */
static size_t record(const char *data, size_t n, int direction) {
    const char *end = memrchr(data, '\n', n);
    if (end == NULL) return 0;
    size_t whole = (size_t)(end - data) + 1;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0) != SQLITE_OK) die_sql("begin");
    commits++;
    for (const char *line = data; line < data + whole;) {
        const char *nl = memchr(line, '\n', (size_t)(data + whole - line));
        sqlite3_bind_int64(insert, 1, commits);
        sqlite3_bind_int(insert, 2, direction);
        sqlite3_bind_text(insert, 3, line, (int)(nl - line), SQLITE_STATIC);
        if (sqlite3_step(insert) != SQLITE_DONE) die_sql("insert");
        sqlite3_reset(insert);
        line = nl + 1;
    }
    if (sqlite3_exec(db, "COMMIT", 0, 0, 0) != SQLITE_OK) die_sql("commit");
    return whole;
}

/* One read of `from`, written on to `to`: at once, or with --db after its frames commit. */
static int copy(int from, int to, struct pending *p, int direction) {
    if (db == NULL) {
        char buf[65536];
        ssize_t n = read(from, buf, sizeof buf);
        return n <= 0 ? -1 : write_all(to, buf, (size_t)n);
    }
    ssize_t n = read(from, p->data + p->len, BUF - p->len);
    if (n <= 0) return -1;
    p->len += (size_t)n;
    size_t whole = record(p->data, p->len, direction);
    if (whole == 0) return 0;
    if (write_all(to, p->data, whole) < 0) return -1;
    memmove(p->data, p->data + whole, p->len - whole);
    p->len -= whole;
    return 0;
}

static void open_db(const char *path) {
    if (sqlite3_open(path, &db) != SQLITE_OK) die_sql("open");
    const char *setup = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                        "CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY,"
                        " txn INTEGER NOT NULL, direction INTEGER NOT NULL,"
                        " line TEXT NOT NULL);";
    if (sqlite3_exec(db, setup, 0, 0, 0) != SQLITE_OK) die_sql("setup");
    if (sqlite3_prepare_v2(db, "INSERT INTO frames (txn, direction, line) VALUES (?, ?, ?)", -1,
                           &insert, 0) != SQLITE_OK)
        die_sql("prepare");
}

int main(int argc, char **argv) {
    int arg = 1;
    if (argc > 3 && strcmp(argv[1], "--db") == 0) {
        open_db(argv[2]);
        arg = 3;
    }
    if (arg >= argc) {
        fprintf(stderr, "usage: relay [--db FILE] AGENT ARGV...\n");
        return 2;
    }
    static struct pending from_client, from_agent;
    int in[2], out[2];
    if (pipe(in) || pipe(out)) return 1;
    pid_t agent = fork();
    if (agent == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the agent dies with its relay */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        execvp(argv[arg], argv + arg);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    struct pollfd fds[2] = {{0, POLLIN, 0}, {out[0], POLLIN, 0}};
    int client_open = 1;
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (client_open && fds[0].revents & (POLLIN | POLLHUP)) {
            if (copy(0, in[1], &from_client, 0) < 0) { /* the client's end: the agent's */
                close(in[1]);
                client_open = 0;
                fds[0].fd = -1;
            }
        }
        if (fds[1].revents & (POLLIN | POLLHUP)) {
            if (copy(out[0], 1, &from_agent, 1) < 0) break; /* the agent's end: ours */
        }
    }
    int status = 0;
    waitpid(agent, &status, 0);
    if (db != NULL) sqlite3_close(db);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
