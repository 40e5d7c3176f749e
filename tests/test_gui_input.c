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
 *    the Model page's weights chooser, F5 the Runs page; Ctrl+Return on the Datasets page shows
 *    the Train page and starts a run (and, with Start refused, does nothing), Ctrl+. on the Runs
 *    page stops it.
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

#include <math.h>
#include <unistd.h>

#include "gui_util.h"
#include "nnlab/runs.h"

static char db[700];

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

/* The Train page's shortcuts work from the other pages as theirs do: Ctrl+Return on the Datasets
 * page shows the Train page and starts a run, Ctrl+. on the Runs page stops it; with Start
 * refused, Ctrl+Return on the Datasets page leaves the page as it is. */
static void check_train_shortcuts(void)
{
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "name", "keys-run");
    xdotool("key --clearmodifiers alt+1");
    spin(300);
    xdotool("key --clearmodifiers ctrl+Return");
    const int started = wait_for(running, 5000);
    const char *shown = page_shown();
    ok(started && shown && strcmp(shown, "train") == 0,
       "Ctrl+Return on the Datasets page shows the Train page and starts a run (%s)",
       shown ? shown : "none");
    xdotool("key --clearmodifiers alt+4");
    spin(300);
    xdotool("key --clearmodifiers ctrl+period");
    ok(wait_for(stopped, 30000) && run_status("keys-run", "stopped"),
       "Ctrl+. on the Runs page stops it");
    /* The name is taken now: Start is refused. */
    xdotool("key --clearmodifiers alt+1");
    spin(300);
    xdotool("key --clearmodifiers ctrl+Return");
    spin(500);
    shown = page_shown();
    ok(!running() && shown && strcmp(shown, "datasets") == 0,
       "with Start refused, Ctrl+Return on the Datasets page starts nothing and stays there (%s)",
       shown ? shown : "none");
}

int main(int argc, char **argv)
{
    gui_start(argv, "nnlab-input", "1920x1080", 1);

    plan(43);
    char data_dir[700];
    snprintf(data_dir, sizeof data_dir, "%s/bands", gui_tmp);
    snprintf(db, sizeof db, "%s/nnlab.db", gui_tmp);
    mkdir(data_dir, 0755);
    gui_write_bands(data_dir, "train", 3000, 0);
    gui_write_bands(data_dir, "t10k", 60, 0);

    GObject *app = gui_open(db);
    resize(1024, 700);
    GtkWidget *start = find(win, GTK_TYPE_BUTTON, "train.start");
    GtkWidget *stop = find(win, GTK_TYPE_BUTTON, "train.stop");
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
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "threads", "1");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "batch", "8");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1000");
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "lr", "0.05");
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
    gtk_widget_activate_action(train_widget(), "train.option", "(ss)", "epochs", "1000");
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
    check_train_shortcuts();

    gtk_window_destroy(GTK_WINDOW(win));
    spin(200);
    g_object_unref(app);
    return done_testing();
}
#endif
