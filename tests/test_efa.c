// test_efa.c: the EFA checks of llm/platform/efa.h with fake instance
// metadata (a SageMaker resourceconfig.json under $TRAIN_GPT_SM_ROOT) and
// fake NCCL logs: which instance types have EFA, which network NCCL's log
// names, and that a multi-node run on sockets where EFA exists is stopped
// with one clear error line (exit 1) unless --allow-nccl-sockets.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llm/platform/efa.h"
#include "tests/testlib.h"

static char tmp_root[256];

// NCCL 2.2x's INFO lines for its choice of network (host:pid:tid [dev] NCCL INFO ...).
static const char* LOG_SOCKET =
    "algo-1:412:412 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    "algo-1:412:412 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
    "algo-1:412:412 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
    "algo-1:412:412 [0] NCCL INFO Using network Socket\n"
    "algo-1:412:412 [0] NCCL INFO comm 0x5 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 53000 commId 0x1 - Init START\n";
static const char* LOG_OFI =
    "algo-1:412:412 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2\n"
    "algo-1:412:412 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)\n"
    "algo-1:412:412 [0] NCCL INFO Using network Libfabric\n";

static void instance_types(void) {
    const char* efa[] = {"ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge",
                         "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "p5.48xlarge"};
    const char* plain[] = {"ml.g5.2xlarge", "ml.p3.16xlarge", "ml.c5.xlarge", "ml.p5", "", "ml.p55.48xlarge"};
    for (size_t i = 0; i < sizeof efa / sizeof efa[0]; i++)
        CHECK(efa_instance_type_has_efa(efa[i]), "%s has EFA", efa[i]);
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        CHECK(!efa_instance_type_has_efa(plain[i]), "'%s' has no EFA", plain[i]);
}

static void log_network(void) {
    char net[64];
    nccl_log_network(LOG_SOCKET, net, sizeof net);
    CHECK(strcmp(net, "Socket") == 0, "socket log: '%s'", net);
    nccl_log_network(LOG_OFI, net, sizeof net);
    CHECK(strcmp(net, "Libfabric") == 0, "ofi log: '%s'", net);
    nccl_log_network("algo-1:1:1 [0] NCCL INFO Using network AWS Libfabric\r\nx Using network Socket\n", net, sizeof net);
    CHECK(strcmp(net, "Socket") == 0, "a second communicator on sockets: '%s'", net);
    nccl_log_network("NCCL INFO Bootstrap : Using eth0\n", net, sizeof net);
    CHECK(net[0] == 0, "no network line: '%s'", net);
}

static void decision(void) {
    char why[1024] = "";
    CHECK(efa_sockets_problem("ml.p5.48xlarge", 2, "Socket", why, sizeof why) &&
              strstr(why, "socket transport between the 2 nodes of this ml.p5.48xlarge") &&
              strstr(why, "--allow-nccl-sockets 1"),
          "2 p5 nodes on sockets: '%s'", why);
    CHECK(!efa_sockets_problem("ml.p5.48xlarge", 1, "Socket", why, sizeof why), "one node: no network between nodes");
    CHECK(!efa_sockets_problem("ml.p5.48xlarge", 2, "Libfabric", why, sizeof why), "EFA in use");
    CHECK(!efa_sockets_problem("ml.g5.12xlarge", 4, "Socket", why, sizeof why), "no EFA to use");
}

// Instance type from a fake /opt/ml; the environment wins.
static void instance_from_metadata(void) {
    char dir[400], path[500];
    snprintf(dir, sizeof dir, "%s/ml/input/config", tmp_root);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0, "mkdir");
    snprintf(path, sizeof path, "%s/resourceconfig.json", dir);
    FILE* f = fopen(path, "w");
    fprintf(f, "{\"current_host\": \"algo-1\", \"current_instance_type\": \"ml.p5.48xlarge\", \"hosts\": [\"algo-1\", "
               "\"algo-2\"], \"network_interface_name\": \"eth0\"}\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/ml", tmp_root);
    setenv("TRAIN_GPT_SM_ROOT", path, 1);
    unsetenv("TRAIN_GPT_INSTANCE_TYPE");
    char type[64];
    efa_instance_type(type, sizeof type);
    CHECK(strcmp(type, "ml.p5.48xlarge") == 0, "from resourceconfig.json: '%s'", type);
    setenv("TRAIN_GPT_INSTANCE_TYPE", "ml.g5.xlarge", 1);
    efa_instance_type(type, sizeof type);
    CHECK(strcmp(type, "ml.g5.xlarge") == 0, "from the environment: '%s'", type);
    unsetenv("TRAIN_GPT_INSTANCE_TYPE");
}

// begin/end as the trainer calls them around NCCL's start, with "NCCL"
// writing the given log where it was told to; in a child, since the
// problem is fatal. Returns the exit status; the child's stderr in err.
static int run_check(const char* log, int nodes, int allow, char* err, size_t errsize) {
    char errpath[400];
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmp_root);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errpath, "w", stderr)) _exit(99);
        unsetenv("NCCL_DEBUG");
        unsetenv("NCCL_DEBUG_FILE");
        setenv("TMPDIR", tmp_root, 1);
        EfaCheck c;
        efa_check_begin(&c, nodes, allow);
        const char* file = getenv("NCCL_DEBUG_FILE");
        if (file && log) {  // what NCCL would do with the settings
            FILE* f = fopen(file, "w");
            fputs(log, f);
            fclose(f);
        }
        efa_check_end(&c);
        fprintf(stderr, "passed; NCCL_DEBUG=%s; log left: %d\n", getenv("NCCL_DEBUG") ? getenv("NCCL_DEBUG") : "-",
                file ? access(file, F_OK) == 0 : 0);
        fflush(stderr);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    size_t len = 0;
    char* text = (char*)test_read_file(errpath, &len);
    snprintf(err, errsize, "%s", text ? text : "");
    free(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void check_end_to_end(void) {
    char err[2048];
    int rc = run_check(LOG_SOCKET, 2, 0, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "train_gpt: error: NCCL chose its TCP socket transport between the 2 nodes of this "
                                  "ml.p5.48xlarge") && !strstr(err, "passed"),
          "sockets on 2 p5 nodes: exit %d, '%.400s'", rc, err);
    int lines = 0;
    for (const char* p = err; (p = strstr(p, "train_gpt: error:")); p++) lines++;
    CHECK(lines == 1, "%d error lines", lines);
    rc = run_check(LOG_OFI, 2, 0, err, sizeof err);
    CHECK(rc == 0 && strstr(err, "passed; NCCL_DEBUG=INFO; log left: 0"), "EFA in use: exit %d, '%.400s'", rc, err);
    rc = run_check(LOG_SOCKET, 2, 1, err, sizeof err);
    CHECK(rc == 0 && strstr(err, "passed; NCCL_DEBUG=-"), "--allow-nccl-sockets 1: exit %d, '%.400s'", rc, err);
    rc = run_check(LOG_SOCKET, 1, 0, err, sizeof err);
    CHECK(rc == 0 && strstr(err, "passed; NCCL_DEBUG=-"), "one node: nothing set, exit %d, '%.400s'", rc, err);
    rc = run_check(NULL, 2, 0, err, sizeof err);
    CHECK(rc == 0 && strstr(err, "warning: on this ml.p5.48xlarge NCCL's log did not say which network"),
          "no log: exit %d, '%.400s'", rc, err);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_efa.XXXXXX");
    if (!mkdtemp(tmp_root)) return 1;
    RUN(instance_types);
    RUN(log_network);
    RUN(decision);
    RUN(instance_from_metadata);
    RUN(check_end_to_end);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp_root);
    return TESTS_DONE();
}
