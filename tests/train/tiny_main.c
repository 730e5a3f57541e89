// tiny_main.c — a generated training binary's main() over the hand-written test models:
// TINY_MODEL (tiny, tiny_ref, tiny_nan, tiny_bad, tiny_wrong, tiny_wrong_reduction,
// tiny_bad_index, tiny_packed, tiny_from_shard, tiny_word, tiny_words, tiny_unsynced,
// tiny_stale, tiny_slow, tok; default tiny) picks the model.
#include <stdio.h>
#include <stdlib.h>

#include "rt_train.h"
#include "tiny_model.h"

int main(int argc, char** argv) {
    const rt_model* m = tiny_model_by_name(getenv("TINY_MODEL"));
    if (!m) {
        fprintf(stderr, "tiny_train: unknown TINY_MODEL '%s'\n", getenv("TINY_MODEL"));
        return 2;
    }
    return rt_train_main(m, argc, argv);
}
