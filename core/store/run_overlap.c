/* What a cluster run's settings say about its exchange's overlap, for `nnlab runs RUN` and the
 * window's Runs page alike. The settings hold "overlap" ("auto", "on", "off"; absent in runs
 * from before the option: "auto") and, once --overlap auto has measured, the session's record of
 * its choice (core/store/session.c): overlap_chosen ("overlapped" or "synchronous"),
 * overlap_sync_ms, overlap_overlapped_ms (the members' mean median step times) and overlap_step
 * (the mode holds after that step). A resumed run that measured again holds the newer choice. */
#include <stdio.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab/runs.h"

static double number(const struct nl_json *root, const char *key, double fallback)
{
    const struct nl_json *v = nl_json_get(root, key);
    return v && v->type == NL_JSON_NUMBER ? v->number : fallback;
}

int nl_run_overlap_parse(const char *settings_json, struct nl_run_overlap *o, struct nl_error *err)
{
    struct nl_json_doc *doc = NULL;
    int rc;

    memset(o, 0, sizeof *o);
    rc = nl_json_parse(&doc, settings_json, strlen(settings_json), "run settings", err);
    if (rc < 0)
        return rc;
    const struct nl_json *root = nl_json_root(doc);
    const struct nl_json *cluster = nl_json_get(root, "cluster");
    const struct nl_json *mode = nl_json_get(root, "overlap");
    const struct nl_json *chosen = nl_json_get(root, "overlap_chosen");
    o->cluster = cluster && cluster->type == NL_JSON_BOOL && cluster->boolean;
    snprintf(o->mode, sizeof o->mode, "%s",
             mode && mode->type == NL_JSON_STRING ? mode->string : "auto");
    if (o->cluster && strcmp(o->mode, "auto") == 0 && chosen && chosen->type == NL_JSON_STRING) {
        o->measured = 1;
        o->overlapped = strcmp(chosen->string, "overlapped") == 0;
        o->sync_ms = number(root, "overlap_sync_ms", 0);
        o->overlapped_ms = number(root, "overlap_overlapped_ms", 0);
        o->step = (long)number(root, "overlap_step", 0);
    }
    nl_json_free(doc);
    return 0;
}

const char *nl_run_overlap_text(const struct nl_run_overlap *o, char *buf, size_t size)
{
    if (!o->cluster)
        snprintf(buf, size, "%s", "");
    else if (o->measured)
        snprintf(buf, size, "auto: %s from step %ld (%.1f ms synchronous, %.1f ms overlapped)",
                 o->overlapped ? "overlapped" : "synchronous", o->step + 1, o->sync_ms,
                 o->overlapped_ms);
    else if (strcmp(o->mode, "auto") == 0)
        snprintf(buf, size, "%s", "auto, not measured");
    else
        snprintf(buf, size, "%s", o->mode);
    return buf;
}
