// efa.c: is NCCL on EFA where the instance has it (see efa.h).
#include "llm/platform/efa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/platform/sagemaker.h"
#include "llm/util/json_read.h"

// The EFA-capable GPU families, by the part of the type before its size:
// p4d, p4de (A100), p5, p5e, p5en (H100/H200), p6-b200, p6e-gb200 (Blackwell).
static const char* EFA_FAMILIES[] = {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6e-gb200", "p6-b300"};

int efa_instance_type_has_efa(const char* type) {
    if (!strncmp(type, "ml.", 3)) type += 3;
    const char* dot = strchr(type, '.');
    if (!dot) return 0;
    size_t n = (size_t)(dot - type);
    for (size_t i = 0; i < sizeof EFA_FAMILIES / sizeof EFA_FAMILIES[0]; i++)
        if (strlen(EFA_FAMILIES[i]) == n && !strncmp(type, EFA_FAMILIES[i], n)) return 1;
    return 0;
}

// The whole of a small file (malloc'ed), or NULL.
static char* slurp(const char* path, size_t limit, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    char* text = (char*)xmalloc(limit + 1);
    *len = fread(text, 1, limit, f);
    fclose(f);
    text[*len] = 0;
    return text;
}

void efa_instance_type(char* out, size_t size) {
    out[0] = 0;
    const char* env = getenv("TRAIN_GPT_INSTANCE_TYPE");
    if (env && env[0]) {
        snprintf(out, size, "%s", env);
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/input/config/resourceconfig.json", sagemaker_root());
    size_t len;
    char* text = slurp(path, 1 << 20, &len);
    if (!text) return;
    char err[128];
    JsonValue* root = json_parse(text, len, err, sizeof err);
    const char* type = root ? json_get_string(root, "current_instance_type") : NULL;
    if (type) snprintf(out, size, "%s", type);
    json_value_free(root);
    free(text);
}

void nccl_log_network(const char* log, char* out, size_t size) {
    out[0] = 0;
    const char* key = "Using network ";
    for (const char* at = strstr(log, key); at; at = strstr(at + 1, key)) {
        at += strlen(key);
        size_t n = strcspn(at, "\r\n");
        while (n > 0 && at[n - 1] == ' ') n--;
        if (n >= size) n = size - 1;
        memcpy(out, at, n);
        out[n] = 0;
        if (strcmp(out, "Socket") == 0) return;  // any communicator on sockets is the problem
    }
}

int efa_sockets_problem(const char* type, int nodes, const char* network, char* why, size_t whysize) {
    if (nodes < 2 || !efa_instance_type_has_efa(type) || strcmp(network, "Socket") != 0) return 0;
    snprintf(why, whysize,
             "NCCL chose its TCP socket transport between the %d nodes of this %s, which has EFA (NCCL's log: "
             "\"Using network Socket\"): the aws-ofi-nccl plugin was not loaded, and collectives would crawl or hang. "
             "Check that the plugin is installed where NCCL looks (libnccl-net.so, or libnccl-net-$NCCL_NET_PLUGIN.so, "
             "on LD_LIBRARY_PATH) and FI_PROVIDER=efa; --allow-nccl-sockets 1 runs anyway",
             nodes, type);
    return 1;
}

void efa_check_begin(EfaCheck* c, int nodes, int allow_sockets) {
    memset(c, 0, sizeof *c);
    c->nodes = nodes;
    if (allow_sockets || nodes < 2) return;
    efa_instance_type(c->type, sizeof c->type);
    if (!efa_instance_type_has_efa(c->type)) return;
    c->active = 1;
    const char* debug = getenv("NCCL_DEBUG");
    if (debug && debug[0]) {
        // The user's log settings stand; their file, if any, is read.
        const char* file = getenv("NCCL_DEBUG_FILE");
        if (file && !strchr(file, '%')) snprintf(c->log_path, sizeof c->log_path, "%s", file);
        return;
    }
    const char* tmp = getenv("TMPDIR");
    snprintf(c->log_path, sizeof c->log_path, "%s/train_gpt_nccl.%ld.log", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    setenv("NCCL_DEBUG", "INFO", 1);
    if (!getenv("NCCL_DEBUG_SUBSYS")) setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
    setenv("NCCL_DEBUG_FILE", c->log_path, 1);
    c->own_log = 1;
}

void efa_check_end(EfaCheck* c) {
    if (!c->active) return;
    char network[64] = "";
    size_t len = 0;
    char* log = c->log_path[0] ? slurp(c->log_path, 16u << 20, &len) : NULL;
    if (log) nccl_log_network(log, network, sizeof network);
    free(log);
    if (c->own_log) unlink(c->log_path);
    char why[1024];
    if (efa_sockets_problem(c->type, c->nodes, network, why, sizeof why)) fatal("%s", why);
    if (!network[0])
        warn("on this %s NCCL's log did not say which network it uses (NCCL_DEBUG is set to %s without a file to "
             "read): the check that NCCL uses EFA between nodes was not made",
             c->type, getenv("NCCL_DEBUG"));
}
