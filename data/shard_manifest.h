// shard_manifest.h: the manifest.json that prepare_data writes last into its
// output folder, read by train_gpt as a promise about the shards beside it.
//
// A folder with a manifest is a finished prepare_data run: every shard that
// training reads from it must be listed there, with the listed size, and the
// checksum (xxh3) of the folder's first listed shard read must match (a
// cheap sample: the full check of every shard would read the whole data set
// at start-up). A manifest of an older prepare_data without sizes or
// checksums is checked for the listing only. A folder without a manifest
// (llm.c's own shards, or an interrupted prepare_data, which removes the old
// manifest before it touches a shard) is taken as it is.
// Each entry of "shards" has "file" (a name in the folder), "bytes" and
// "xxh3" (16 hex digits), as dev/prepare_shards.c writes them.
#pragma once

#include <stdint.h>

// Refuses, with one line naming the shard, the manifest and the field, a
// shard its folder's manifest does not list or lists with another size or
// checksum. `flag` names the flag the paths came from.
void shard_manifest_check(char* const* paths, int count, const char* flag);
// Size and xxh3 of a whole file; 0 on success, else an errno.
int shard_file_digest(const char* path, int64_t* bytes, uint64_t* xxh3);
