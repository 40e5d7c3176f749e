/* The Runs page's details of the selected run (its settings, recoveries, the process training
 * it) and the settings of the runs ticked, side by side with the differing ones marked. */
#include "runs-page-private.h"

/* ---- The list ---- */

/* "2026-11-21T11:04:20Z" as "2026-11-21 11:04:20 UTC" in buf. */
const char *runs_tidy_time(char *buf, size_t size, const char *iso)
{
    if (!iso[0])
        return "";
    char t[32];
    g_strlcpy(t, iso, sizeof t);
    g_strdelimit(t, "TZ", ' ');
    g_snprintf(buf, size, "%s UTC", g_strstrip(t));
    return buf;
}

/* A value of the settings as people read it: numbers with 6 significant digits (the stored
 * floats carry 9), arrays joined. */
static void json_value(GString *s, const struct nl_json *v, const char *sep)
{
    switch (v->type) {
    case NL_JSON_NUMBER:
        g_string_append_printf(s, "%g", v->number);
        break;
    case NL_JSON_STRING:
        g_string_append(s, v->string);
        break;
    case NL_JSON_BOOL:
        g_string_append(s, v->boolean ? "yes" : "no");
        break;
    case NL_JSON_ARRAY:
        for (size_t i = 0; i < v->count; i++) {
            if (i)
                g_string_append(s, sep);
            json_value(s, &v->items[i], sep);
        }
        break;
    default:
        break;
    }
}

/* Whether a setting holds its "off" value (0, false, an empty list), which is not shown. */
static gboolean setting_off(const struct nl_json *v)
{
    return (v->type == NL_JSON_NUMBER && v->number == 0) ||
           (v->type == NL_JSON_BOOL && !v->boolean) || (v->type == NL_JSON_ARRAY && !v->count) ||
           v->type == NL_JSON_NULL;
}

/* A run's task as `nnlab datasets` names it: "regress TARGET" for a regression run (its target
 * from the dataset, when the store still has it), NULL for a classification run, whose
 * "classes N" says it. Freed by the caller. */
static char *run_task(NlRunsPage *p, const struct nl_run_info *info)
{
    struct nl_dataset_info d;
    struct nl_error err = {0};
    if (!info->regression)
        return NULL;
    if (nl_dataset_info(p->win->store, info->dataset, &d, &err) == 0 && d.regression)
        return g_strdup_printf("regress %s", d.target);
    return g_strdup("regression");
}

/* A run's settings as "key value · key value", leaving out those that are off; task, when not
 * NULL, stands where the class count would ("classes 1" of a regression run). A cluster run's
 * overlap reads as `nnlab runs RUN` gives it: "overlap auto: overlapped from step 28 (41.2 ms
 * synchronous, 35.0 ms overlapped)", the members' measurement in place of its overlap_* keys. */
static GString *settings_text(const char *settings, const char *task)
{
    GString *s = g_string_new(NULL);
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    struct nl_run_overlap ov;
    if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) < 0 ||
        nl_run_overlap_parse(settings, &ov, &err) < 0) {
        nl_json_free(doc);
        g_string_append(s, settings);
        return s;
    }
    const struct nl_json *root = nl_json_root(doc);
    for (size_t i = 0; root->type == NL_JSON_OBJECT && i < root->count; i++) {
        const struct nl_json *v = &root->items[i];
        const gboolean always = strcmp(v->key, "seed") == 0 || strcmp(v->key, "momentum") == 0;
        if (!always && (setting_off(v) || v->type == NL_JSON_OBJECT))
            continue;
        if (g_str_has_prefix(v->key, "overlap_"))
            continue;
        if (s->len)
            g_string_append(s, " · ");
        if (task && strcmp(v->key, "classes") == 0) {
            g_string_append(s, task);
            continue;
        }
        if (ov.cluster && strcmp(v->key, "overlap") == 0) {
            char text[160];
            g_string_append_printf(s, "overlap %s", nl_run_overlap_text(&ov, text, sizeof text));
            continue;
        }
        g_string_append_printf(s, "%s ", v->key);
        json_value(s, v, strcmp(v->key, "input") == 0 ? "×" : ", ");
    }
    const struct nl_json *aug = nl_json_get(root, "augment");
    for (size_t i = 0; aug && aug->type == NL_JSON_OBJECT && i < aug->count; i++)
        if (!setting_off(&aug->items[i])) {
            g_string_append_printf(s, " · augment %s ", aug->items[i].key);
            json_value(s, &aug->items[i], ", ");
        }
    nl_json_free(doc);
    return s;
}

/* Adds the settings under v to keys (in order of first appearance) and to vals (key to text),
 * nested objects as "outer.inner". */
static void flatten(const struct nl_json *v, const char *prefix, GPtrArray *keys, GHashTable *vals)
{
    for (size_t i = 0; v->type == NL_JSON_OBJECT && i < v->count; i++) {
        const struct nl_json *m = &v->items[i];
        char *key = prefix ? g_strdup_printf("%s.%s", prefix, m->key) : g_strdup(m->key);
        if (m->type == NL_JSON_OBJECT) {
            flatten(m, key, keys, vals);
            g_free(key);
            continue;
        }
        GString *t = g_string_new(NULL);
        json_value(t, m, ", ");
        if (!g_ptr_array_find_with_equal_func(keys, key, g_str_equal, NULL))
            g_ptr_array_add(keys, g_strdup(key));
        g_hash_table_replace(vals, key, g_string_free(t, FALSE));
    }
}

/* The settings of the runs ticked for comparison (two or more) side by side, a row a setting,
 * the rows where they differ marked with ≠ and the accent colour. */
void runs_update_comparison(NlRunsPage *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->compare_grid)))
        gtk_grid_remove(GTK_GRID(p->compare_grid), child);
    g_free(p->comparison);
    p->comparison = NULL;
    gtk_widget_set_visible(p->compare_grid, FALSE);
    if (g_hash_table_size(p->compare) < 2)
        return;
    struct nl_run_info *list;
    int n;
    struct nl_error err = {0};
    if (nl_run_list(p->win->store, &list, &n, &err) < 0)
        return;
    GPtrArray *keys = g_ptr_array_new_with_free_func(g_free);
    GPtrArray *runs = g_ptr_array_new_with_free_func((GDestroyNotify)g_hash_table_unref);
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    static const char *const fixed[] = {"model", "dataset", "status", "epochs done"};
    for (size_t i = 0; i < G_N_ELEMENTS(fixed); i++)
        g_ptr_array_add(keys, g_strdup(fixed[i]));
    for (int i = 0; i < n; i++) {
        char *settings = NULL;
        struct nl_run_info info;
        if (!g_hash_table_contains(p->compare, list[i].name) ||
            nl_run_get(p->win->store, list[i].name, &info, NULL, &settings, &err) < 0)
            continue;
        GHashTable *vals = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        g_hash_table_replace(vals, g_strdup("model"), g_strdup(info.model));
        g_hash_table_replace(vals, g_strdup("dataset"), g_strdup(info.dataset));
        g_hash_table_replace(vals, g_strdup("status"), g_strdup(info.status));
        g_hash_table_replace(vals, g_strdup("epochs done"),
                             g_strdup_printf("%d", info.epochs_done));
        struct nl_json_doc *doc = NULL;
        if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) == 0)
            flatten(nl_json_root(doc), NULL, keys, vals);
        nl_json_free(doc);
        char *task = run_task(p, &info); /* a regression run: its target, not "1" */
        if (task && g_hash_table_contains(vals, "classes"))
            g_hash_table_replace(vals, g_strdup("classes"), task);
        else
            g_free(task);
        nl_free(settings);
        g_ptr_array_add(runs, vals);
        g_ptr_array_add(names, g_strdup(info.name));
    }
    nl_free(list);
    GString *text = g_string_new("setting");
    GtkGrid *g = GTK_GRID(p->compare_grid);
    gtk_grid_attach(g, runs_cell_label("Setting", FALSE, TRUE), 0, 0, 1, 1);
    for (guint r = 0; r < runs->len; r++) {
        GtkWidget *l = runs_cell_label(names->pdata[r], FALSE, TRUE);
        gtk_label_set_ellipsize(GTK_LABEL(l), PANGO_ELLIPSIZE_MIDDLE);
        gtk_label_set_max_width_chars(GTK_LABEL(l), 16);
        gtk_widget_set_tooltip_text(l, names->pdata[r]);
        gtk_grid_attach(g, l, (int)r + 1, 0, 1, 1);
        g_string_append_printf(text, "\t%s", (const char *)names->pdata[r]);
    }
    g_string_append_c(text, '\n');
    int differ = 0;
    for (guint k = 0; k < keys->len; k++) {
        const char *key = keys->pdata[k];
        const char *first = g_hash_table_lookup(runs->pdata[0], key);
        gboolean same = TRUE;
        for (guint r = 1; r < runs->len; r++)
            same &= g_strcmp0(first, g_hash_table_lookup(runs->pdata[r], key)) == 0;
        differ += !same;
        char *kl = g_strdup_printf("%s%s", same ? "" : "≠ ", key);
        GtkWidget *l = runs_cell_label(kl, FALSE, FALSE);
        g_string_append(text, kl);
        g_free(kl);
        if (!same)
            gtk_widget_add_css_class(l, "nl-diff");
        else
            gtk_widget_add_css_class(l, "dim-label");
        gtk_grid_attach(g, l, 0, (int)k + 1, 1, 1);
        for (guint r = 0; r < runs->len; r++) {
            const char *v = g_hash_table_lookup(runs->pdata[r], key);
            GtkWidget *vl = runs_cell_label(v ? v : "–", FALSE, FALSE);
            gtk_label_set_ellipsize(GTK_LABEL(vl), PANGO_ELLIPSIZE_END);
            gtk_label_set_max_width_chars(GTK_LABEL(vl), 16);
            gtk_widget_set_tooltip_text(vl, v ? v : "not set");
            if (!same)
                gtk_widget_add_css_class(vl, "nl-diff");
            gtk_grid_attach(g, vl, (int)r + 1, (int)k + 1, 1, 1);
            g_string_append_printf(text, "\t%s", v ? v : "–");
        }
        g_string_append_c(text, '\n');
    }
    char *head = g_strdup_printf("%d of %u settings differ (marked ≠)", differ, keys->len);
    GtkWidget *hl = runs_cell_label(head, FALSE, FALSE);
    gtk_widget_add_css_class(hl, "caption");
    gtk_grid_attach(g, hl, 0, (int)keys->len + 1, (int)runs->len + 1, 1);
    g_free(head);
    p->comparison = g_string_free(text, FALSE);
    gtk_widget_set_visible(p->compare_grid, runs->len >= 2);
    g_ptr_array_unref(keys);
    g_ptr_array_unref(runs);
    g_ptr_array_unref(names);
}

void runs_show_details(NlRunsPage *p)
{
    struct nl_run_info info;
    struct nl_error err = {0};
    char *settings = NULL;
    if (!p->selected || nl_run_get(p->win->store, p->selected, &info, NULL, &settings, &err) < 0) {
        gtk_label_set_text(GTK_LABEL(p->details), "Select a run to see its settings.");
        return;
    }
    char *task = run_task(p, &info);
    GString *set = settings_text(settings, task);
    g_free(task);
    /* A cluster run's lost workers, as the train page showed them. */
    struct nl_run_recovery *rec = NULL;
    int nrec = 0;
    if (nl_run_recoveries(p->win->store, info.id, &rec, &nrec, &err) < 0)
        nrec = 0;
    for (int i = 0; i < nrec; i++) {
        const struct nl_run_recovery *r = &rec[i];
        if (i == 0)
            g_string_append(set, "\nRecoveries:");
        g_string_append_printf(set, "\n• step %ld · %s: %s; %s", r->step, r->host, r->what,
                               r->action);
        if (strcmp(r->action, "restarted") == 0)
            g_string_append_printf(set, " (restart %d)", r->restarts);
        g_string_append_printf(set, ", on %d worker%s", r->workers, r->workers == 1 ? "" : "s");
    }
    nl_free(rec);
    /* A run another process trains: who, and how far it has got, from the store. */
    if (strcmp(info.status, "running") == 0 && info.owner_host[0] && !nl_window_training(p->win)) {
        struct nl_run_epoch *ep = NULL;
        int ne = 0;
        if (nl_run_epochs(p->win->store, info.id, &ep, &ne, &err) < 0)
            ne = 0;
        g_string_append_printf(set, "\nTraining in process %ld on %s, followed live from the store",
                               info.owner_pid, info.owner_host);
        if (ne > 0 && isfinite(ep[ne - 1].images_per_second))
            g_string_append_printf(set, ": epoch %d done, %.0f samples/s", ep[ne - 1].epoch,
                                   ep[ne - 1].images_per_second);
        nl_free(ep);
    }
    /* Names come from people: escape everything but the markup added here. */
    char created[48], finished[48];
    char *esc = g_markup_printf_escaped(
        "<b>%s</b>  %s on %s · %s · started %s%s%s\n%s", info.name, info.model, info.dataset,
        info.status, runs_tidy_time(created, sizeof created, info.created),
        info.finished[0] ? ", finished " : "",
        runs_tidy_time(finished, sizeof finished, info.finished), set->str);
    g_string_free(set, TRUE);
    gtk_label_set_markup(GTK_LABEL(p->details), esc);
    g_free(esc);
    nl_free(settings);
}
