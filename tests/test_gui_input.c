/* The window under real input, under Xvfb: xdotool moves the pointer to a widget's centre
 * (computed here from the widget tree: gtk_widget_compute_point into the window, plus the
 * surface's offset) and clicks, or types and presses keys, as a person would; the X server
 * delivers them to GTK like any other input. Checks that:
 *  - a notification (toast) that has faded no longer takes the pointer: its rectangle picks what
 *    lies under it, and a click on "Import a CSV File…" there opens the file chooser;
 *  - Start and Stop are in view and take clicks at 1024x700, 1200x800 and 1920x1080;
 *  - Start says why it is refused (no dataset; a run name that exists, with the next free name),
 *    and Ctrl+Return then starts nothing and clears nothing of the last run's view;
 *  - a click on Start starts a run, a click on Stop just after a toast faded stops it;
 *  - a number field refuses text that is not a number, visibly (error mark, reason shown), and
 *    keeps its value; Ctrl+Return with such text typed does not start.
 *  - the main flow works from the keyboard alone: Alt+1…5 change pages, Tab reaches Start and
 *    Enter presses it, Ctrl+. stops the run, Ctrl+I opens the import chooser and Escape closes
 *    it; Ctrl+O on the Train page shows the Predict page and opens its image chooser, Ctrl+Shift+O
 *    the Model page's weights chooser, F5 the Runs page.
 * Screenshots of the train page at 1024x700 and 1920x1080 go to BUILD/ui-screenshots/.
 *
 * Run by meson directly, it re-executes itself under dbus-run-session and xvfb-run (a
 * 1920x1080 screen); it skips when those programs, xdotool or GTK are missing. */
#include "nnlab-config.h"
#include "tap.h"

#if !NNLAB_HAVE_GTK
int main(void)
{
    skip_all("built without GTK 4");
}
#else

#include <errno.h>
#include <gdk/x11/gdkx.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "idx_writer.h"
#include "nnlab-ui.h"
#include "nnlab/runs.h"
#include "window.h"

#define W 28

static char tmp[512], shots[1024], db[700];
static GtkWidget *win;

static void bail_out(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bail_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    exit(1);
}

static int in_path(const char *prog)
{
    char *p = g_find_program_in_path(prog);
    g_free(p);
    return p != NULL;
}

/* Re-runs this program inside a private D-Bus session and a virtual X server. */
static void reexec(char **argv)
{
    if (!in_path("xvfb-run") || !in_path("dbus-run-session") || !in_path("xauth") ||
        !in_path("xdotool"))
        skip_all("xvfb-run, xauth, dbus-run-session or xdotool missing (apt-get install xvfb "
                 "xauth dbus-daemon xdotool)");
    char dir[] = "/tmp/nnlab-input-XXXXXX";
    if (!mkdtemp(dir))
        skip_all("mkdtemp: %s", strerror(errno));
    static const char *sub[] = {"config", "data", "cache", "runtime"};
    static const char *var[] = {"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                                "XDG_RUNTIME_DIR"};
    for (int i = 0; i < 4; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, sub[i]);
        mkdir(path, 0700);
        setenv(var[i], path, 1);
    }
    setenv("NNLAB_GUI_TMP", dir, 1);
    setenv("NNLAB_GUI_INNER", "1", 1);
    setenv("GSK_RENDERER", "cairo", 1);
    setenv("GSETTINGS_BACKEND", "memory", 1);
    setenv("GDK_BACKEND", "x11", 1);
    setenv("GTK_A11Y", "none", 1);
    setenv("NO_AT_BRIDGE", "1", 1);
    unsetenv("WAYLAND_DISPLAY");
    unsetenv("DISPLAY");
    char *args[] = {"dbus-run-session",       "--",    "xvfb-run", "-a", "-s",
                    "-screen 0 1920x1080x24", argv[0], NULL};
    execvp(args[0], args);
    skip_all("cannot run dbus-run-session: %s", strerror(errno));
}

/* Six classes of 28x28 images: a bright band at a class's own rows, with noise. */
static void write_dataset(const char *dir, const char *prefix, uint32_t n)
{
    uint8_t *px = malloc((size_t)n * W * W), *lab = malloc(n);
    uint32_t r = 7;
    for (uint32_t i = 0; i < n; i++) {
        lab[i] = (uint8_t)(i % 6);
        for (int k = 0; k < W * W; k++) {
            r = r * 1103515245u + 12345u;
            const int row = k / W, band = 2 + 4 * lab[i];
            px[(size_t)i * W * W + k] =
                (uint8_t)((row >= band && row < band + 3 ? 200 : 0) + ((r >> 16) % 50));
        }
    }
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(b, sizeof b, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    idx_write(a, b, px, lab, n, W, W);
    free(px);
    free(lab);
}

/* ---- Driving the main loop ---- */

static void spin(int ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;
    while (g_get_monotonic_time() < end)
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(2000);
}

typedef int (*cond_fn)(void);
static int wait_for(cond_fn cond, int timeout_ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    while (!cond() && g_get_monotonic_time() < end)
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(2000);
    return cond();
}

static NlWindow *nw(void)
{
    return NL_WINDOW(win);
}

static int have_dataset(void)
{
    return nw()->data != NULL;
}

static int running(void)
{
    return train_page_running(nw()->train);
}

static int stopped(void)
{
    return !train_page_running(nw()->train);
}

static long points(void)
{
    long n;
    int finished;
    train_page_stats(nw()->train, &n, &finished);
    return n;
}

static int some_points(void)
{
    return points() >= 5;
}

static int toast_gone(void)
{
    return !gtk_widget_get_visible(nw()->toast);
}

static void show(const char *page)
{
    gtk_widget_activate_action(win, "win.show-page", "s", page);
    spin(400);
}

/* Resizes the window and lets it settle (no window manager: the size is taken as asked, less
 * the client-side decorations' margins). */
static void resize(int w, int h)
{
    gtk_window_set_default_size(GTK_WINDOW(win), w, h);
    /* A loaded machine takes longer to lay the window out again: wait for the size, up to 5 s. */
    for (int waited = 0; waited < 5000; waited += 100) {
        spin(100);
        const int ww = gtk_widget_get_width(win), wh = gtk_widget_get_height(win);
        if (ww <= w && ww >= w - 20 && wh <= h && wh >= h - 20)
            break;
    }
    spin(500);
}

static int screenshot(const char *name)
{
    char path[1200];
    const int w = gtk_widget_get_width(win), h = gtk_widget_get_height(win);
    GdkPaintable *paint = gtk_widget_paintable_new(win);
    GtkSnapshot *s = gtk_snapshot_new();
    gdk_paintable_snapshot(paint, s, w, h);
    GskRenderNode *node = gtk_snapshot_free_to_node(s);
    int ok = 0;
    if (node) {
        GskRenderer *r = gtk_native_get_renderer(GTK_NATIVE(win));
        GdkTexture *tex = gsk_renderer_render_texture(r, node, &GRAPHENE_RECT_INIT(0, 0, w, h));
        snprintf(path, sizeof path, "%s/%s.png", shots, name);
        ok = gdk_texture_save_to_png(tex, path);
        g_object_unref(tex);
        gsk_render_node_unref(node);
    }
    g_object_unref(paint);
    if (ok)
        diag("screenshot %s (%dx%d)", path, w, h);
    return ok;
}

/* ---- Finding widgets and giving them real input ---- */

/* The first widget under root (depth first) of that type whose action-name is action (NULL: any
 * action), or NULL. */
static GtkWidget *find(GtkWidget *root, GType type, const char *action)
{
    if (G_TYPE_CHECK_INSTANCE_TYPE(root, type)) {
        const char *a =
            GTK_IS_ACTIONABLE(root) ? gtk_actionable_get_action_name(GTK_ACTIONABLE(root)) : NULL;
        if (!action || (a && strcmp(a, action) == 0))
            return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find(c, type, action);
        if (f)
            return f;
    }
    return NULL;
}

/* The spin button of the mapped page whose adjustment's value is v and upper bound upper. */
static GtkWidget *find_spin(GtkWidget *root, double upper)
{
    if (GTK_IS_SPIN_BUTTON(root) && gtk_widget_get_mapped(root) &&
        gtk_adjustment_get_upper(gtk_spin_button_get_adjustment(GTK_SPIN_BUTTON(root))) == upper)
        return root;
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_spin(c, upper);
        if (f)
            return f;
    }
    return NULL;
}

/* The entry with that placeholder, mapped. */
static GtkWidget *find_entry(GtkWidget *root, const char *placeholder)
{
    if (GTK_IS_ENTRY(root) && gtk_widget_get_mapped(root)) {
        const char *p = gtk_entry_get_placeholder_text(GTK_ENTRY(root));
        if (p && strcmp(p, placeholder) == 0)
            return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find_entry(c, placeholder);
        if (f)
            return f;
    }
    return NULL;
}

/* The centre of w in the window's surface coordinates (what xdotool's --window takes). */
static int centre(GtkWidget *w, double *x, double *y)
{
    graphene_rect_t r;
    if (!gtk_widget_compute_bounds(w, win, &r))
        return 0;
    double sx = 0, sy = 0;
    gtk_native_get_surface_transform(GTK_NATIVE(win), &sx, &sy);
    *x = r.origin.x + r.size.width / 2 + sx;
    *y = r.origin.y + r.size.height / 2 + sy;
    return 1;
}

/* Whether w is wholly inside the window and is what the pointer finds at its centre (disabled
 * or not). */
static int in_view(GtkWidget *w)
{
    graphene_rect_t r;
    if (!w || !gtk_widget_get_mapped(w) || !gtk_widget_compute_bounds(w, win, &r))
        return 0;
    if (r.origin.x < 0 || r.origin.y < 0 || r.origin.x + r.size.width > gtk_widget_get_width(win) ||
        r.origin.y + r.size.height > gtk_widget_get_height(win))
        return 0;
    GtkWidget *at = gtk_widget_pick(win, r.origin.x + r.size.width / 2,
                                    r.origin.y + r.size.height / 2, GTK_PICK_INSENSITIVE);
    return at && (at == w || gtk_widget_is_ancestor(at, w));
}

/* Runs xdotool with these arguments (the window's X id substituted for "WIN"), then lets the
 * main loop take the events. */
static int xdotool(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int xdotool(const char *fmt, ...)
{
    char args[512], cmd[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    unsigned long xid = gdk_x11_surface_get_xid(gtk_native_get_surface(GTK_NATIVE(win)));
    GString *s = g_string_new("xdotool ");
    for (const char *p = args; *p; p++) {
        if (strncmp(p, "WIN", 3) == 0) {
            g_string_append_printf(s, "%lu", xid);
            p += 2;
        } else {
            g_string_append_c(s, *p);
        }
    }
    snprintf(cmd, sizeof cmd, "%s", s->str);
    g_string_free(s, TRUE);
    int rc = system(cmd);
    spin(150);
    return rc == 0;
}

/* A left click at w's centre. */
static int click(GtkWidget *w)
{
    double x, y;
    if (!w || !centre(w, &x, &y))
        return 0;
    return xdotool("mousemove --window WIN %.0f %.0f click 1", x, y);
}

/* Clicks into a text field, replaces its text with text, and presses Tab. */
static int type_into(GtkWidget *w, const char *text)
{
    return click(w) && xdotool("key --clearmodifiers ctrl+a") &&
           xdotool("type --delay 20 '%s'", text) && xdotool("key Tab");
}

static GtkWidget *file_chooser(void)
{
    GListModel *tops = gtk_window_get_toplevels();
    GtkWidget *found = NULL;
    for (guint i = 0; i < g_list_model_get_n_items(tops); i++) {
        GObject *o = g_list_model_get_item(tops, i);
        if (GTK_IS_FILE_CHOOSER_DIALOG(o) && gtk_widget_get_visible(GTK_WIDGET(o)))
            found = GTK_WIDGET(o);
        g_object_unref(o);
    }
    return found;
}

static int chooser_open(void)
{
    return file_chooser() != NULL;
}

static int chooser_gone(void)
{
    return file_chooser() == NULL;
}

static int run_status(const char *name, const char *status)
{
    struct nl_store *s;
    struct nl_run_info info;
    struct nl_error err = {0};
    int rc = nl_store_open(&s, db, &err);
    if (rc < 0)
        return 0;
    rc = nl_run_get(s, name, &info, NULL, NULL, &err);
    nl_store_close(s);
    if (rc == 0 && strcmp(info.status, status) != 0)
        diag("run '%s' is %s after %d epochs, %.1f s", name, info.status, info.epochs_done,
             info.seconds);
    else if (rc < 0)
        diag("run '%s': %s", name, err.msg);
    return rc == 0 && strcmp(info.status, status) == 0;
}

static const char *page_shown(void)
{
    return gtk_stack_get_visible_child_name(nw()->stack);
}

static int reason_has(const char *text)
{
    const char *r = train_page_start_reason(nw()->train);
    return r && strstr(r, text);
}

static int polls_seen;
static int polled(void)
{
    return runs_page_polls(nw()->runs) > polls_seen;
}

/* A page's own shortcut works from another page: Ctrl+O on the Train page shows the Predict page
 * and opens its image chooser; Escape closes it. */
static void check_page_shortcuts(void)
{
    xdotool("key --clearmodifiers alt+3");
    spin(300);
    xdotool("key --clearmodifiers ctrl+o");
    const char *shown = page_shown();
    ok(wait_for(chooser_open, 3000) && shown && strcmp(shown, "predict") == 0,
       "Ctrl+O on the Train page shows the Predict page and opens the image chooser (%s)",
       shown ? shown : "none");
    if (file_chooser())
        xdotool("key Escape");
    ok(wait_for(chooser_gone, 3000), "and Escape closes it");
    if (file_chooser())
        gtk_dialog_response(GTK_DIALOG(file_chooser()), GTK_RESPONSE_CANCEL);
    xdotool("key --clearmodifiers alt+3");
    spin(300);
    xdotool("key --clearmodifiers ctrl+shift+o");
    shown = page_shown();
    ok(wait_for(chooser_open, 3000) && shown && strcmp(shown, "model") == 0,
       "Ctrl+Shift+O on the Train page shows the Model page and opens the weights chooser (%s)",
       shown ? shown : "none");
    if (file_chooser())
        xdotool("key Escape");
    wait_for(chooser_gone, 3000);
    if (file_chooser())
        gtk_dialog_response(GTK_DIALOG(file_chooser()), GTK_RESPONSE_CANCEL);
    xdotool("key --clearmodifiers alt+3");
    spin(300);
    const int polls = polls_seen = runs_page_polls(nw()->runs);
    xdotool("key --clearmodifiers F5");
    spin(300);
    shown = page_shown();
    ok(shown && strcmp(shown, "runs") == 0 && wait_for(polled, 5000),
       "F5 on the Train page shows the Runs page, which reads the store (%s, %d polls before)",
       shown ? shown : "none", polls);
}

int main(int argc, char **argv)
{
    if (!getenv("NNLAB_GUI_INNER"))
        reexec(argv);
    const char *t = getenv("NNLAB_GUI_TMP");
    snprintf(tmp, sizeof tmp, "%s", t ? t : "/tmp");
    const char *build = getenv("NNLAB_BUILD_ROOT");
    snprintf(shots, sizeof shots, "%s/ui-screenshots", build ? build : tmp);
    mkdir(shots, 0755);
    if (!gtk_init_check())
        skip_all("no display even under xvfb-run");

    plan(40);
    char data_dir[700];
    snprintf(data_dir, sizeof data_dir, "%s/bands", tmp);
    snprintf(db, sizeof db, "%s/nnlab.db", tmp);
    mkdir(data_dir, 0755);
    write_dataset(data_dir, "train", 3000);
    write_dataset(data_dir, "t10k", 60);

    GObject *app = nl_app_new(db);
    GError *error = NULL;
    if (!g_application_register(G_APPLICATION(app), NULL, &error))
        bail_out("the application does not register: %s", error->message);
    g_application_activate(G_APPLICATION(app));
    win = GTK_WIDGET(gtk_application_get_active_window(GTK_APPLICATION(app)));
    if (!win)
        bail_out("no window");
    resize(1024, 700);
    GtkWidget *start = find(win, GTK_TYPE_BUTTON, "win.train-start");
    GtkWidget *stop = find(win, GTK_TYPE_BUTTON, "win.train-stop");
    if (!start || !stop)
        bail_out("no Start or Stop button");

    /* Item 3: with no dataset Start says why, next to it. */
    show("train");
    ok(!gtk_widget_is_sensitive(start) && reason_has("Datasets page"),
       "with no dataset, Start is refused and says to choose one on the Datasets page");
    ok(in_view(start) && in_view(stop), "Start and Stop are in view at 1024x700");
    ok(screenshot("input-train-no-dataset-1024x700"), "screenshot of the refused Start");

    gtk_widget_activate_action(GTK_WIDGET(nw()->datasets), "datasets.import-source", "(ss)",
                               "bands", data_dir);
    if (!wait_for(have_dataset, 60000))
        bail_out("the import did not finish");
    /* Wide enough that a run of 1000 epochs lasts minutes: the run must outlast a toast. */
    gtk_widget_activate_action(GTK_WIDGET(nw()->model), "model.spec", "s",
                               "fc1: dense 512\nrelu\nfc2: dense 512\nrelu\nfc3: dense N\n");

    /* Item 1: a faded toast takes no clicks. */
    show("datasets");
    GtkWidget *csv = find(win, GTK_TYPE_BUTTON, "datasets.import-csv");
    nl_window_notify(nw(), "A notification long enough to lie over the buttons of the page, "
                           "as an error message would");
    spin(500);
    graphene_rect_t toast;
    ok(gtk_widget_compute_bounds(nw()->toast, win, &toast), "a toast shows");
    ok(wait_for(toast_gone, 8000), "the toast fades and leaves the window");
    GtkWidget *at = gtk_widget_pick(win, toast.origin.x + toast.size.width / 2,
                                    toast.origin.y + toast.size.height / 2, GTK_PICK_DEFAULT);
    ok(at && at != nw()->toast && !gtk_widget_is_ancestor(at, nw()->toast),
       "the faded toast's rectangle picks what lies under it (%s)",
       at ? G_OBJECT_TYPE_NAME(at) : "nothing");
    ok(click(csv) && wait_for(chooser_open, 3000),
       "a click on “Import a CSV File…” after the toast faded opens the file chooser");
    if (file_chooser())
        gtk_dialog_response(GTK_DIALOG(file_chooser()), GTK_RESPONSE_CANCEL);
    spin(300);

    /* Item 6: number fields refuse what is not a number, visibly. */
    show("train");
    gtk_widget_activate_action(win, "win.train-option", "(ss)", "threads", "1");
    gtk_widget_activate_action(win, "win.train-option", "(ss)", "batch", "8");
    gtk_widget_activate_action(win, "win.train-option", "(ss)", "epochs", "1000");
    gtk_widget_activate_action(win, "win.train-option", "(ss)", "lr", "0.05");
    GtkWidget *lr = find_spin(win, 10);
    ok(lr != NULL, "the Learning rate field is found");
    type_into(lr, "fast");
    GtkAdjustment *lr_adj = gtk_spin_button_get_adjustment(GTK_SPIN_BUTTON(lr));
    ok(gtk_adjustment_get_value(lr_adj) == 0.05, "typing “fast” keeps the learning rate 0.05");
    ok(gtk_widget_has_css_class(lr, "error") && reason_has("“fast” is not a number"),
       "the field is marked and the reason shows next to Start (%s)",
       train_page_start_reason(nw()->train));
    ok(screenshot("input-train-not-a-number-1024x700"), "screenshot of the refused number");
    type_into(lr, "0.02");
    ok(fabs(gtk_adjustment_get_value(lr_adj) - 0.02) < 1e-9 &&
           !gtk_widget_has_css_class(lr, "error") && !train_page_start_reason(nw()->train),
       "a number is taken and the mark goes");
    /* Typed and not yet taken: Ctrl+Return takes it first, and refuses. */
    click(lr);
    xdotool("key --clearmodifiers ctrl+a");
    xdotool("type --delay 20 'x1'");
    xdotool("key --clearmodifiers ctrl+Return");
    ok(!running() && reason_has("“x1” is not a number"),
       "Ctrl+Return with “x1” typed in a number field starts nothing and says why");

    /* Start and Stop with the pointer; Stop just after a toast faded. */
    GtkWidget *name = find_entry(win, "automatic");
    type_into(name, "input-run");
    /* The run must outlast the toast below, whatever the keys typed above reached. */
    gtk_widget_activate_action(win, "win.train-option", "(ss)", "epochs", "1000");
    ok(gtk_widget_is_sensitive(start) && !train_page_start_reason(nw()->train),
       "with a dataset, a model and a free name Start is enabled and says nothing");
    ok(click(start) && wait_for(running, 3000), "a click on Start starts a run");
    ok(wait_for(some_points, 60000), "the run's charts receive points");
    nl_window_notify(nw(), "Another notification long enough to lie over the buttons, as "
                           "an error message would");
    ok(wait_for(toast_gone, 8000) && running(), "a toast fades while the run goes on");
    ok(in_view(stop) && click(stop) && wait_for(stopped, 30000),
       "a click on Stop just after the toast faded stops the run");
    ok(run_status("input-run", "stopped"), "the run is recorded as stopped");
    long kept = points();

    /* Item 4: a run name that exists is refused before anything is cleared. */
    ok(!gtk_widget_is_sensitive(start) && reason_has("“input-run” exists") &&
           reason_has("“input-run-2”"),
       "the name of the last run is refused next to Start, with the next free name (%s)",
       train_page_start_reason(nw()->train));
    click(name);
    xdotool("key --clearmodifiers ctrl+Return");
    ok(!running() && points() == kept && kept > 0,
       "Ctrl+Return with that name starts nothing and keeps the last run's charts (%ld points)",
       kept);
    ok(gtk_widget_get_height(win) <= 700 && in_view(start),
       "the reason fits: the window keeps its height (%d) and Start stays in view",
       gtk_widget_get_height(win));
    ok(screenshot("input-train-name-taken-1024x700"), "screenshot of the refused name");
    type_into(name, "input-run-2");
    ok(gtk_widget_is_sensitive(start) && !train_page_start_reason(nw()->train),
       "the offered name is free");

    /* Item 2: Start and Stop in view at the other sizes. */
    resize(1200, 800);
    ok(in_view(start) && in_view(stop), "Start and Stop are in view at 1200x800");
    resize(1920, 1080);
    ok(in_view(start) && in_view(stop), "Start and Stop are in view at 1920x1080");
    screenshot("input-train-1920x1080");
    resize(1024, 700);
    ok(in_view(start) && in_view(stop), "Start and Stop are in view at 1024x700 again");

    /* The main flow from the keyboard alone. */
    click(name); /* the window takes the keyboard */
    xdotool("key --clearmodifiers alt+1");
    spin(300);
    const char *shown = page_shown();
    ok(shown && strcmp(shown, "datasets") == 0, "Alt+1 shows the Datasets page (%s)", shown);
    xdotool("key --clearmodifiers alt+4");
    spin(300);
    shown = page_shown();
    ok(shown && strcmp(shown, "runs") == 0, "Alt+4 shows the Runs page (%s)", shown);
    xdotool("key --clearmodifiers alt+3");
    spin(300);
    shown = page_shown();
    ok(shown && strcmp(shown, "train") == 0, "Alt+3 shows the Train page (%s)", shown);
    int tabs = 0;
    while (gtk_window_get_focus(GTK_WINDOW(win)) != start && tabs < 80) {
        xdotool("key Tab");
        tabs++;
    }
    ok(gtk_window_get_focus(GTK_WINDOW(win)) == start, "Tab reaches Start (%d presses)", tabs);
    xdotool("key Return");
    ok(wait_for(running, 5000), "Enter on Start starts a run");
    ok(wait_for(some_points, 60000), "which trains");
    xdotool("key --clearmodifiers ctrl+period");
    ok(wait_for(stopped, 30000), "Ctrl+. stops it");
    xdotool("key --clearmodifiers ctrl+i");
    ok(wait_for(chooser_open, 3000), "Ctrl+I opens the import chooser");
    if (file_chooser())
        xdotool("key Escape");
    ok(wait_for(chooser_gone, 3000), "and Escape closes it");
    if (file_chooser())
        gtk_dialog_response(GTK_DIALOG(file_chooser()), GTK_RESPONSE_CANCEL);
    check_page_shortcuts();

    gtk_window_destroy(GTK_WINDOW(win));
    spin(200);
    g_object_unref(app);
    return done_testing();
}
#endif
