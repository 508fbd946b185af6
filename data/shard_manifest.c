// shard_manifest.c: checking shards against their folder's manifest.json
// (see shard_manifest.h).
#include "data/shard_manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "llm/util/json_read.h"

int shard_file_digest(const char* path, int64_t* bytes, uint64_t* xxh3) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno;
    XXH3_state_t* h = XXH3_createState();
    if (!h) fatal("out of host memory for a checksum state");
    XXH3_64bits_reset(h);
    size_t cap = 8u << 20;
    char* buf = (char*)xmalloc(cap);
    int64_t total = 0;
    int e = 0;
    for (;;) {
        ssize_t got = read(fd, buf, cap);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) e = errno;
        if (got <= 0) break;
        XXH3_64bits_update(h, buf, (size_t)got);
        total += got;
    }
    close(fd);
    free(buf);
    *bytes = total;
    *xxh3 = (uint64_t)XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return e;
}

// The folder's manifest, parsed; NULL when it has none.
static JsonValue* load_manifest(const char* path) {
    JsonValue* m = json_load_file(path, 256 << 20, "shard manifest");
    if (!m) return NULL;
    const JsonValue* shards = json_get(m, "shards");
    if (!shards || shards->type != JSON_ARRAY) fatal("%s: no \"shards\" list", path);
    return m;
}

static const JsonValue* find_entry(const JsonValue* shards, const char* name) {
    for (int i = 0; i < shards->count; i++) {
        const char* file = json_get_string(&shards->items[i], "file");
        if (file && !strcmp(file, name)) return &shards->items[i];
    }
    return NULL;
}

void shard_manifest_check(char* const* paths, int count, const char* flag) {
    char folder[4096] = "", manifest_path[4200] = "";
    JsonValue* m = NULL;
    int sampled = 0;
    for (int i = 0; i < count; i++) {
        const char* slash = strrchr(paths[i], '/');
        const char* name = slash ? slash + 1 : paths[i];
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - paths[i]) : 1, slash ? paths[i] : ".");
        if (strcmp(dir, folder) != 0) {  // (paths come sorted: one folder after another)
            if (m) json_value_free(m);
            snprintf(folder, sizeof folder, "%s", dir);
            snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", dir);
            m = load_manifest(manifest_path);
            sampled = 0;
        }
        if (!m) continue;
        const JsonValue* e = find_entry(json_get(m, "shards"), name);
        if (!e)
            fatal("%s (%s): not listed in %s: a shard of another run, or left by an interrupted prepare_data; "
                  "remove it or prepare the folder again",
                  paths[i], flag, manifest_path);
        int64_t listed_bytes;
        uint64_t listed_xxh3 = 0; // read only when "xxh3" is listed
        int has_bytes = json_get_i64(e, "bytes", &listed_bytes);
        const char* hex = json_get_string(e, "xxh3");
        if (json_get(e, "bytes") && !has_bytes)
            fatal("%s: shard '%s': \"bytes\" is not a byte count", manifest_path, name);
        if (hex && (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16))
            fatal("%s: shard '%s': \"xxh3\" is not 16 hex digits", manifest_path, name);
        if (hex) listed_xxh3 = strtoull(hex, NULL, 16);
        if (has_bytes && file_size(paths[i]) != listed_bytes)
            fatal("%s (%s): %lld bytes, but %s lists %lld: the shard changed after prepare_data finished", paths[i],
                  flag, (long long)file_size(paths[i]), manifest_path, (long long)listed_bytes);
        if (hex && !sampled) {
            int64_t bytes;
            uint64_t got;
            int err = shard_file_digest(paths[i], &bytes, &got);
            if (err) fatal("%s (%s): cannot read: %s", paths[i], flag, strerror(err));
            if (got != listed_xxh3)
                fatal("%s (%s): checksum %016llx, but %s lists %s: the shard changed after prepare_data finished",
                      paths[i], flag, (unsigned long long)got, manifest_path, hex);
            sampled = 1;
        }
    }
    if (m) json_value_free(m);
}
