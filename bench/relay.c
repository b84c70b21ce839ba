/* The least any process between an ACP client and its agent can cost: bench/relay.py's
 * byte relay without an interpreter. `relay AGENT ARGV...` starts the agent and copies its
 * stdio to and from its own with poll(2) and read(2)/write(2), unparsed. Built and used by
 * `bench/serve_overhead.py --relays` when a C compiler is present; not part of the product. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int copy(int from, int to) {
    char buf[65536];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0) return -1;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w < 0 && errno != EINTR) return -1;
        if (w > 0) off += w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: relay AGENT ARGV...\n");
        return 2;
    }
    int in[2], out[2];
    if (pipe(in) || pipe(out)) return 1;
    pid_t agent = fork();
    if (agent == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the agent dies with its relay */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        execvp(argv[1], argv + 1);
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
            if (copy(0, in[1]) < 0) { /* the client's end of file is the agent's */
                close(in[1]);
                client_open = 0;
                fds[0].fd = -1;
            }
        }
        if (fds[1].revents & (POLLIN | POLLHUP)) {
            if (copy(out[0], 1) < 0) break; /* the agent's end: the relay's end */
        }
    }
    int status = 0;
    waitpid(agent, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
