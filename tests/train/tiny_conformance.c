// tiny_conformance.c — a generated conformance test's main() over the hand-written tiny
// model and its reference; TINY_MODEL=tiny_bad checks the wrongly planned variant (which
// must fail).
#include <stdlib.h>
#include <string.h>

#include "rt_train.h"
#include "tiny_model.h"

int main(int argc, char** argv) {
    const char* which = getenv("TINY_MODEL");
    const rt_model* m = which && !strcmp(which, "tiny_bad") ? &tiny_bad_model : &tiny_model;
    return rt_conformance_main(m, &tiny_ref_model, argc, argv);
}
