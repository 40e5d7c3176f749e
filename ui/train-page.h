/* The Train page (NlTrainPage): the form of a run's settings, the run in progress and its live
 * charts. A widget with its template (train-page.ui) and its own actions, installed on the class:
 *
 *     train.start               starts a run from the form (Ctrl+Return)
 *     train.stop                asks the run in progress to stop (Ctrl+.)
 *     train.check-hosts         checks the hosts of the Hosts field (Ctrl+Shift+H)
 *     train.option (ss)         sets a field of the form by key, for tests and scripts
 *     train.watch (s)           follows a run another process trains on the store ("": stops)
 *
 * The shortcuts act anywhere in the window, as every page's do (nl_page_class_add_shortcut). The
 * page is split by concern: train-page.c (the widget), train-page-form.c (settings, validation, the
 * reason shown beside Start), train-page-hosts.c (Check Hosts), train-page-job.c (the running job
 * on core's nl_session), train-page-watch.c (a run trained elsewhere, followed from the store) and
 * train-page-charts.c (the live charts). Private to ui/. */
#ifndef NNLAB_UI_TRAIN_PAGE_H
#define NNLAB_UI_TRAIN_PAGE_H

#include <gtk/gtk.h>

G_BEGIN_DECLS

typedef struct _NlWindow NlWindow;

#define NL_TYPE_TRAIN_PAGE (nl_train_page_get_type())
G_DECLARE_FINAL_TYPE(NlTrainPage, nl_train_page, NL, TRAIN_PAGE, GtkWidget)

/* The Train page of w, with a reference the caller owns. */
NlTrainPage *train_page_new(NlWindow *w);
void train_page_dataset_changed(NlTrainPage *p);
gboolean train_page_running(NlTrainPage *p);
/* Why Start is refused, or why a number field refused its text, as shown next to Start; NULL
 * when nothing is shown. */
const char *train_page_start_reason(NlTrainPage *p);
/* Asks a running training to stop and waits for its thread. NULL is fine. */
void train_page_stop_and_wait(NlTrainPage *p);
/* For tests: chart points received and runs finished since the window opened. */
void train_page_stats(NlTrainPage *p, long *points, int *finished);
/* Whether the charts' timer runs (only during a run, while they are on screen). */
gboolean train_page_ticking(NlTrainPage *p);
/* Continues a stopped run from its latest checkpoint, as `nnlab train --resume RUN` does; a
 * cluster run on the hosts it recorded, with the form's SSH options. The form shows the run's
 * settings. */
void train_page_resume(NlTrainPage *p, const char *run);
/* For tests: how many host checks have finished, and the last one's report (one line a
 * host). */
void train_page_hosts_report(NlTrainPage *p, int *checks_done, const char **text);
/* For tests: the points of worker i's images/s series in the run shown. */
int train_page_worker_points(NlTrainPage *p, int worker);
/* For tests: the recoveries shown since the window opened, the markers on the loss chart and
 * the last one's line (NULL: none in the run shown). */
void train_page_recoveries(NlTrainPage *p, int *count, int *markers, const char **last);
/* For tests: the line under the hosts of what --overlap auto chose in the run shown, and whether
 * the loss chart has its marker (NULL, 0: no choice shown). */
const char *train_page_overlap(NlTrainPage *p, int *marker);
/* Follows the run named run, trained by another process (the command line, SSH hosts, mpirun)
 * on the same store: the charts show its steps, epochs and recoveries as they are stored. */
void train_page_watch(NlTrainPage *p, const char *run);
/* For tests: the run followed (NULL: none), the last one followed and how following it ended
 * (its status; NULL while it goes on), the run offered to watch (NULL: none), and the epochs on
 * the accuracy chart. */
const char *train_page_watching(NlTrainPage *p);
void train_page_watched(NlTrainPage *p, const char **run, const char **ended);
const char *train_page_offered(NlTrainPage *p);
int train_page_epochs_drawn(NlTrainPage *p);
/* For tests: the form's epochs, hosts and run name. */
void train_page_form(NlTrainPage *p, int *epochs, const char **hosts, const char **name);

G_END_DECLS

#endif
