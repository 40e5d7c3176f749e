/* The driver's following of a cluster run's members, for the SSH and the MPI driver alike: see
 * net/follow.h. */
#include "net/follow.h"

#include <math.h>
#include <string.h>

#include "net/proto.h"
#include "nnlab/alloc.h"
#include "nnlab/metrics.h"
#include "nnlab/rng.h"

struct nl_follow_member *nl_follow_member(const struct nl_follow *f, int i)
{
    return (struct nl_follow_member *)(void *)(f->member0 + (size_t)i * f->member_stride);
}

static const char *who(const struct nl_follow *f, int i)
{
    return f->link.name(f->link.ud, i);
}

static void busy(const struct nl_follow *f, int begin)
{
    if (f->link.busy)
        f->link.busy(f->link.ud, begin);
}

int nl_follow_init(struct nl_follow *f, struct nl_error *err)
{
    struct nl_train_result *res = f->res;
    const struct nl_train_opts *o = f->o;
    const long ntrain = (long)f->d->split[NL_TRAIN].n;

    memset(res, 0, sizeof *res);
    res->val_accuracy = res->test_accuracy = res->test_loss = NAN;
    res->regression = f->d->regression;
    res->train_mae = res->train_rmse = res->val_mae = res->val_rmse = NAN;
    res->test_mae = res->test_rmse = NAN;
    if (f->n < 1)
        return nl_error_set(err, NL_EINVAL, "no members to train on");
    if (ntrain == 0)
        return nl_error_set(err, NL_EINVAL, "dataset '%s' has no training samples", f->d->name);
    int rc = nl_optim_validate(&o->optim, err);
    if (rc < 0)
        return rc;
    f->iters = (ntrain + o->batch - 1) / o->batch;
    if (o->resume && (rc = nl_resume_check(o->resume, o->epochs, f->iters, err)) < 0)
        return rc;
    if (f->window < 1 || f->window > NL_FOLLOW_MAX_WINDOW)
        f->window = NL_FOLLOW_MAX_WINDOW;
    f->nstate = nl_optim_state_arrays(&o->optim);
    f->judges = nl_train_judges(o);
    nl_judge_init(&f->judge);
    const size_t sfloats = (size_t)f->nstate * f->m->ntrainable;
    f->slot_metrics = nl_calloc((size_t)f->window * (size_t)f->n, sizeof *f->slot_metrics);
    f->step_w = nl_calloc((size_t)f->n, sizeof *f->step_w);
    f->weights = nl_alloc_floats(f->m->nparams);
    f->ckpt_state = nl_alloc_floats(sfloats + 1);
    f->cp.state = nl_alloc_floats(sfloats + 1);
    f->cp.values = nl_alloc_floats(f->m->nparams + 1);
    f->cp.step = -1;
    f->watched = nl_calloc((size_t)o->epochs + 1, sizeof *f->watched);
    if (!f->slot_metrics || !f->step_w || !f->weights || !f->ckpt_state || !f->cp.state ||
        !f->cp.values || !f->watched)
        return nl_error_set(err, NL_ENOMEM, "out of memory for %d members", f->n);
    for (int k = 0; k < f->window; k++) {
        f->slots[k].step = -1;
        f->slots[k].w = f->slot_metrics + (size_t)k * (size_t)f->n;
    }
    for (int i = 0; i < f->n; i++)
        f->step_w[i].host = nl_follow_member(f, i)->total.host = who(f, i);
    return 0;
}

void nl_follow_release(struct nl_follow *f)
{
    nl_free(f->slot_metrics);
    nl_free(f->step_w);
    nl_free(f->weights);
    nl_free(f->ckpt_state);
    nl_free(f->cp.state);
    nl_free(f->cp.values);
    nl_free(f->watched);
    f->slot_metrics = NULL;
    f->step_w = NULL;
    f->weights = f->ckpt_state = f->cp.state = f->cp.values = NULL;
    f->watched = NULL;
}

const float *nl_follow_resume(struct nl_follow *f, long *start)
{
    const struct nl_resume *r = f->o->resume;
    *start = 0;
    if (!r)
        return NULL;
    *start = r->iteration;
    f->next_emit = r->iteration;
    f->epochs_done = r->epoch;
    f->res->epochs = r->epoch;
    /* The epochs judged so far, as a local resume replays them (unknown: NaN). */
    for (int e = 0; e < r->epoch; e++) {
        f->watched[e] = r->watched ? r->watched[e] : NAN;
        nl_judge_epoch(&f->judge, f->o, e + 1, f->watched[e]);
    }
    const size_t sfloats = (size_t)f->nstate * f->m->ntrainable;
    if (!r->optim_state || r->optim_floats != sfloats || sfloats == 0)
        return NULL;
    memcpy(f->ckpt_state, r->optim_state, sfloats * sizeof(float));
    return r->optim_state;
}

int nl_follow_readable(const struct nl_follow *f, int i)
{
    if (i == 0 && f->pending_epoch > 0)
        return 0; /* its next frames follow the epoch's end */
    return nl_follow_member(f, i)->next_step < f->next_emit + f->window;
}

/* Within an epoch the checkpoint is written once its pieces are in; at an epoch's end, by
 * end_epoch with the epoch's metrics. */
static int mid_checkpoint(struct nl_follow *f, struct nl_error *err)
{
    if (f->cp.step % f->iters == 0 || !f->cp.params || (f->nstate > 0 && f->cp.count < f->n))
        return 0;
    const size_t sfloats = (size_t)f->nstate * f->m->ntrainable;
    memcpy(f->ckpt_state, f->cp.state, sfloats * sizeof(float));
    /* As a local run: one judged on training accuracy (no validation split) checkpoints at
     * epoch ends only, for a checkpoint cannot hold an epoch's accuracy so far. */
    const int epoch_ends_only = f->judges && f->d->split[NL_VAL].n == 0;
    if (f->hooks && f->hooks->checkpoint && !epoch_ends_only) {
        const int epoch = (int)(f->cp.step / f->iters);
        struct nl_rng rng;
        nl_rng_seed(&rng, nl_rng_epoch_seed(f->o->seed, epoch + 1));
        struct nl_checkpoint cp = {
            .epoch = epoch,
            .iteration = f->cp.step,
            .params = f->cp.values,
            .nparams = f->m->nparams,
            .optim_state = f->nstate > 0 ? f->cp.state : NULL,
            .optim_floats = sfloats,
            .rng = &rng,
        };
        busy(f, 1);
        int rc = f->hooks->checkpoint(f->hooks->ud, &cp, err);
        busy(f, 0);
        if (rc < 0)
            return rc;
    }
    f->cp.step = -1;
    return 0;
}

/* What --overlap auto chose, from rank 0 (every member chose the same): an OVERLAP event, which
 * the session records with the run (a store write: slow work). */
static int on_overlap(struct nl_follow *f, const unsigned char *pl, struct nl_error *err)
{
    struct nl_overlap_choice c;
    nl_overlap_decode(pl, &c);
    if (!isfinite(c.sync_seconds) || !isfinite(c.overlap_seconds) || c.step < 1)
        return nl_error_set(err, NL_EFORMAT, "%s: a malformed overlap report", who(f, 0));
    if (!f->hooks || !f->hooks->event)
        return 0;
    struct nl_event ev = {
        .kind = NL_EVENT_OVERLAP,
        .epochs = f->o->epochs,
        .iters = f->iters,
        .epoch = (int)((c.step - 1) / f->iters) + 1,
        .iter = (c.step - 1) % f->iters + 1,
        .overlap = &c,
    };
    busy(f, 1);
    const int stop = f->hooks->event(f->hooks->ud, &ev);
    busy(f, 0);
    if (stop)
        return nl_error_set(err, NL_ECANCELED, "training stopped at epoch %d", ev.epoch);
    return 0;
}

/* A member's piece of the checkpoint after its latest reported step. */
static int checkpoint_piece(struct nl_follow *f, int i, uint32_t type, const unsigned char *pl,
                            uint32_t len, struct nl_error *err)
{
    const size_t nt = f->m->ntrainable;
    const long step = nl_follow_member(f, i)->next_step; /* pieces follow the step's METRIC */

    if (f->cp.step >= 0 && f->cp.step != step)
        return NL_FOLLOW_HOLD;
    if (f->cp.step < 0) {
        f->cp.step = step;
        f->cp.count = f->cp.params = 0;
    }
    if (type == NL_FRAME_PARAMS) {
        if (len != f->m->nparams * sizeof(float))
            return nl_error_set(err, NL_EFORMAT, "%s: a checkpoint's parameters of %u bytes",
                                who(f, i), len);
        memcpy(f->cp.values, pl, len);
        f->cp.params = 1;
        return mid_checkpoint(f, err);
    }
    struct nl_state_head h;
    if (len < NL_STATE_HEADER)
        return nl_error_set(err, NL_EFORMAT, "%s: a malformed optimizer state", who(f, i));
    nl_state_head_decode(&h, pl);
    const size_t lo = (size_t)h.lo, hi = (size_t)h.hi, own = hi - lo;
    if (lo > hi || hi > nt || h.copies != 1 || (long)h.step != step ||
        len != nl_state_size(own, f->nstate, 1))
        return nl_error_set(err, NL_EFORMAT, "%s: a malformed optimizer state for step %ld",
                            who(f, i), step);
    const float *s = (const float *)(const void *)(pl + NL_STATE_HEADER);
    for (int k = 0; k < f->nstate; k++)
        memcpy(f->cp.state + (size_t)k * nt + lo, s + own * (size_t)(1 + k), own * sizeof(float));
    f->cp.count++;
    return mid_checkpoint(f, err);
}

static int on_metric(struct nl_follow *f, int i, const unsigned char *pl, struct nl_error *err)
{
    struct nl_follow_member *p = nl_follow_member(f, i);
    struct nl_metric mt;
    nl_metric_decode(&mt, pl);
    const long step = (long)(mt.epoch - 1) * f->iters + mt.iter - 1;
    if (mt.epoch < 1 || mt.epoch > f->o->epochs || mt.iter < 1 || mt.iter > f->iters ||
        step != p->next_step || (step >= f->next_emit + f->window && !f->recovering))
        return nl_error_set(err, NL_EFORMAT,
                            "%s: a metric for epoch %d step %d, while step %ld of the run is due",
                            who(f, i), mt.epoch, mt.iter, f->next_emit + 1);
    p->next_step++;
    /* While recovering, reports far ahead (a member the driver lost touch with went on for a
     * while) are past what is kept: the steps are reported without them. */
    if (step >= f->next_emit + f->window)
        return 0;
    struct nl_follow_slot *sl = &f->slots[step % f->window];
    if (sl->step != step) {
        struct nl_metric *keep = sl->w;
        memset(sl, 0, sizeof *sl);
        memset(keep, 0, (size_t)f->n * sizeof *keep);
        sl->w = keep;
        sl->step = step;
        sl->epoch = mt.epoch;
        sl->iter = mt.iter;
    }
    sl->count++;
    sl->samples += mt.samples;
    sl->correct += mt.correct;
    sl->loss_sum += mt.loss_sum;
    if (mt.compute_seconds + mt.comm_seconds > sl->busy)
        sl->busy = mt.compute_seconds + mt.comm_seconds;
    sl->w[i] = mt;
    return 0;
}

int nl_follow_frame(struct nl_follow *f, int i, uint32_t type, const unsigned char *pl,
                    uint32_t len, struct nl_error *err)
{
    struct nl_follow_member *p = nl_follow_member(f, i);
    if (type == NL_FRAME_METRIC && len == NL_METRIC_SIZE)
        return on_metric(f, i, pl, err);
    if (type == NL_FRAME_WEIGHTS && i == 0 && len == f->m->nparams * sizeof(float)) {
        if (f->pending_epoch > 0 && f->recovering)
            return 0; /* a later epoch's, far ahead: that epoch ends without them */
        if (f->pending_epoch > 0)
            return nl_error_set(err, NL_EFORMAT, "%s: an epoch's weights came twice", who(f, i));
        memcpy(f->weights, pl, len);
        f->pending_epoch++;
        return 0;
    }
    if (type == NL_FRAME_DONE && len == 0) {
        if (!p->done)
            f->ndone++;
        p->done = 1;
        return 0;
    }
    if (type == NL_FRAME_STATE || (type == NL_FRAME_PARAMS && i == 0)) {
        if (f->recovering)
            return 0; /* no checkpoint is made while recovering */
        return checkpoint_piece(f, i, type, pl, len, err);
    }
    if (type == NL_FRAME_OVERLAP && i == 0 && len == NL_OVERLAP_SIZE)
        return on_overlap(f, pl, err);
    if (type == NL_FRAME_FAULT || type == NL_FRAME_HEARTBEAT || type == NL_FRAME_PARAMS)
        return NL_FOLLOW_OTHER;
    return nl_error_set(err, NL_EFORMAT, "%s: an unexpected frame (type %u)", who(f, i), type);
}

/* An epoch is complete: rank 0's weights are its end. Validation, checkpoint, EPOCH event, judging:
 * a local run's epoch end (nl_epoch_event, nl_epoch_report, nl_epoch_watched, nl_judge_epoch).
 * During a recovery to step force_to, weights NULL means they were lost with rank 0 (the others
 * went past the epoch's end before the loss was seen): the epoch is reported without
 * validation, and its metrics go with a checkpoint at force_to when that step is in the next
 * epoch (the parameters and state after it are known), else with none. */
static int end_epoch(struct nl_follow *f, const float *weights, long steps_done,
                     struct nl_error *err)
{
    const struct nl_train_opts *o = f->o;
    const struct nl_dataset *d = f->d;
    struct nl_model *m = f->m;
    const long iters = f->iters;
    const int epoch = (int)(steps_done / iters);
    struct nl_epoch_sums e = {
        .epoch = epoch,
        .iters = iters,
        .loss = f->loss,
        .correct = f->correct,
        .samples = f->samples,
        .seconds = f->busy,
        .val_loss = NAN,
        .val_accuracy = NAN,
        .lr = nl_schedule_lr(&o->schedule, o->optim.lr, steps_done, iters, (long)o->epochs * iters,
                             f->judge.plateau.factor),
        .nworkers = f->n,
        .workers = f->step_w,
    };
    struct nl_event ev;
    int rc;

    f->train_seconds += f->busy;
    f->total_samples += f->samples;
    if (weights)
        memcpy(m->params, weights, m->nparams * sizeof(float));
    /* A regression run's training R^2 is not gathered from the members (NaN); its validation
     * and test metrics are the driver's, as a local run's. */
    e.regression = d->regression;
    e.target_std = d->target_std;
    e.val_mae = e.val_rmse = NAN;
    if (weights && d->split[NL_VAL].n > 0) {
        struct nl_reg_sums val;
        double r2;
        rc = nl_evaluate_reg(m, d, NL_VAL, 0, o->loss, &e.val_loss, &e.val_accuracy, &val, err);
        if (rc < 0)
            return rc;
        nl_reg_finish(&val, d->target_std, &e.val_mae, &e.val_rmse, &r2);
    }
    for (int i = 0; i < f->n; i++) {
        struct nl_worker_metrics *w = &f->step_w[i];
        *w = nl_follow_member(f, i)->total;
        w->loss = w->samples > 0 ? w->loss / w->samples : 0.0;
    }
    nl_epoch_event(&e, o, f->res, &ev);
    const int at_force = f->force_to > 0 && !weights && steps_done + iters > f->force_to;
    struct nl_checkpoint cp;
    /* The data order of a cluster run follows from the seed and the epoch alone
     * (net/partition.c); the generator stored is seeded from them. */
    struct nl_rng rng;
    if (weights || at_force) {
        nl_rng_seed(&rng, nl_rng_epoch_seed(o->seed, epoch + at_force));
        /* The optimizer state: every member's slice of it for this step, or what a recovery
         * gathered for the step it goes on from. */
        const size_t sfloats = (size_t)f->nstate * m->ntrainable;
        const float *state = NULL;
        if (f->nstate > 0 && f->cp.step == steps_done && f->cp.count == f->n)
            state = f->cp.state;
        else if (f->nstate > 0 && f->force_to > 0 && (at_force || steps_done == f->force_to))
            state = f->force_state;
        if (state)
            memcpy(f->ckpt_state, state, sfloats * sizeof(float));
        cp = (struct nl_checkpoint){
            .epoch = epoch,
            .iteration = at_force ? f->force_to : steps_done,
            .params = at_force ? f->force_params : m->params,
            .nparams = m->nparams,
            .optim_state = state,
            .optim_floats = state ? sfloats : 0,
            .rng = &rng,
        };
    }
    /* The members' pieces of this step's checkpoint are spent once it is stored (a failed store
     * keeps them), also when the event then stops the run. */
    rc = nl_epoch_report(f->hooks, weights || at_force ? &cp : NULL, &ev, err);
    if ((rc == 0 || rc == NL_ECANCELED) && f->cp.step == steps_done)
        f->cp.step = -1;
    if (rc < 0)
        return rc;
    f->samples = f->correct = 0;
    f->loss = f->busy = 0;
    /* What a local run watches: validation accuracy, or training accuracy without a
     * validation split. */
    const double watched = nl_epoch_watched(&ev);
    f->watched[epoch - 1] = watched;
    if (nl_judge_epoch(&f->judge, o, epoch, watched))
        f->res->stopped_early = 1;
    return 0;
}

/* A step every member reported (or one a recovery reports): its totals and its ITER event. */
static int emit_step(struct nl_follow *f, struct nl_follow_slot *sl, long ne, struct nl_error *err)
{
    const struct nl_train_opts *o = f->o;
    const long iters = f->iters;
    for (int i = 0; i < f->n; i++) {
        const struct nl_metric *mt = &sl->w[i];
        struct nl_worker_metrics *t = &nl_follow_member(f, i)->total;
        struct nl_worker_metrics *w = &f->step_w[i];
        t->samples += mt->samples;
        t->loss += mt->loss_sum;
        t->compute_seconds += mt->compute_seconds;
        t->comm_seconds += mt->comm_seconds;
        t->bytes_sent += mt->bytes_sent;
        w->samples = mt->samples;
        w->loss = mt->samples > 0 ? mt->loss_sum / mt->samples : 0.0;
        w->compute_seconds = mt->compute_seconds;
        w->comm_seconds = mt->comm_seconds;
        w->bytes_sent = mt->bytes_sent;
    }
    f->samples += sl->samples;
    f->correct += sl->correct;
    f->loss += sl->loss_sum;
    f->busy += sl->busy;
    if (!isfinite(sl->loss_sum))
        return nl_error_set(err, NL_ENAN,
                            "epoch %d, step %ld: the loss is not finite; lower the learning rate "
                            "(now %g)",
                            sl->epoch, sl->iter, o->optim.lr);
    if (!f->hooks || !f->hooks->event)
        return 0;
    const double elapsed = f->busy;
    const long gstep = ne + 1;
    const double per_step = (f->train_seconds + elapsed) / (double)gstep;
    struct nl_event ev = {
        .kind = NL_EVENT_ITER,
        .epoch = sl->epoch,
        .epochs = o->epochs,
        .iter = sl->iter,
        .iters = iters,
        .loss = sl->loss_sum / (double)sl->samples,
        .accuracy = f->d->regression ? NAN : (double)f->correct / (double)f->samples,
        .regression = f->d->regression,
        .mae = NAN,
        .rmse = NAN,
        .val_mae = NAN,
        .val_rmse = NAN,
        .test_mae = NAN,
        .test_rmse = NAN,
        .val_loss = NAN,
        .val_accuracy = NAN,
        .test_accuracy = NAN,
        .test_loss = NAN,
        .seconds = elapsed,
        .images_per_second = (double)f->samples / (elapsed > 0 ? elapsed : 1e-9),
        .eta_seconds = per_step * (double)((long)o->epochs * iters - gstep),
        .lr = nl_schedule_lr(&o->schedule, o->optim.lr, gstep, iters, (long)o->epochs * iters,
                             f->judge.plateau.factor),
        .samples = f->samples,
        .nworkers = f->n,
        .workers = f->step_w,
    };
    if (f->hooks->event(f->hooks->ud, &ev))
        return nl_error_set(err, NL_ECANCELED, "training stopped at epoch %d", sl->epoch);
    return 0;
}

/* The epoch that ends at step ne is over: the members wait for its judgement (in a recovery the
 * next SETUP carries it). */
static int send_judgement(struct nl_follow *f, struct nl_error *err)
{
    unsigned char j[NL_JUDGE_SIZE];
    nl_judge_encode(j, f->epochs_done, f->watched[f->epochs_done - 1]);
    for (int i = 0; i < f->n; i++) {
        int rc = f->link.send(f->link.ud, i, NL_FRAME_JUDGE, j, sizeof j, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int nl_follow_emit(struct nl_follow *f, long force_to, struct nl_error *err)
{
    const long iters = f->iters;
    int rc;

    f->force_to = force_to;
    for (;;) {
        const long ne = f->next_emit;
        if (ne > 0 && ne % iters == 0 && ne / iters > f->epochs_done) {
            /* The epoch's weights: rank 0's; in a recovery to this very step, the parameters
             * gathered; before it, lost with rank 0 (NULL). */
            const float *w = f->weights;
            if (f->pending_epoch == 0 && force_to > 0 && ne <= force_to)
                w = ne == force_to ? f->force_params : NULL;
            else if (f->pending_epoch == 0)
                return 0;
            /* The checkpoint's optimizer state: every member's slice (not waited for when
             * forced: the epoch's last step is done, ne <= force_to). */
            if (f->nstate > 0 && !(f->cp.step == ne && f->cp.count == f->n) && ne > force_to)
                return 0;
            busy(f, 1);
            rc = end_epoch(f, w, ne, err);
            busy(f, 0);
            if (rc < 0)
                return rc;
            if (w == f->weights)
                f->pending_epoch--;
            f->epochs_done++;
            if (force_to == 0 && f->judges && f->epochs_done < f->o->epochs &&
                (rc = send_judgement(f, err)) < 0)
                return rc;
            continue;
        }
        struct nl_follow_slot *sl = &f->slots[ne % f->window];
        if (!(sl->step == ne && sl->count == f->n) && ne >= force_to)
            return 0;
        if (sl->step == ne && sl->samples > 0 && (rc = emit_step(f, sl, ne, err)) < 0)
            return rc;
        sl->step = -1;
        f->next_emit++;
    }
}

int nl_follow_run(struct nl_follow *f, struct nl_error *err)
{
    while (f->ndone < f->n) {
        int progressed = 0;
        for (int i = 0; i < f->n; i++) {
            if (nl_follow_member(f, i)->done)
                continue;
            int got = f->link.serve(f->link.ud, i, err);
            if (got < 0)
                return got;
            progressed |= got;
        }
        int rc = nl_follow_emit(f, 0, err);
        if (rc < 0)
            return rc;
        rc = f->link.check(f->link.ud, progressed, err);
        if (rc != 0)
            return rc == NL_FOLLOW_END ? 0 : rc;
        if (!progressed)
            f->link.wait(f->link.ud);
    }
    return 0;
}

int nl_follow_finish(struct nl_follow *f, struct nl_error *err)
{
    struct nl_train_result *res = f->res;
    const struct nl_train_opts *o = f->o;
    const struct nl_dataset *d = f->d;
    if (res->epochs != o->epochs && !res->stopped_early)
        return nl_error_set(err, NL_EIO, "the members finished after %d of %d epochs", res->epochs,
                            o->epochs);
    if (d->split[NL_TEST].n > 0) {
        struct nl_reg_sums test;
        double r2;
        int rc = nl_evaluate_reg(f->m, d, NL_TEST, 0, o->loss, &res->test_loss, &res->test_accuracy,
                                 &test, err);
        if (rc < 0)
            return rc;
        nl_reg_finish(&test, d->target_std, &res->test_mae, &res->test_rmse, &r2);
    }
    res->seconds = f->train_seconds;
    res->images_per_second =
        (double)f->total_samples / (f->train_seconds > 0 ? f->train_seconds : 1e-9);
    for (int i = 0; i < f->n; i++) {
        struct nl_worker_metrics *w = &f->step_w[i];
        *w = nl_follow_member(f, i)->total;
        w->loss = w->samples > 0 ? w->loss / w->samples : 0.0;
    }
    if (f->hooks && f->hooks->event) {
        struct nl_event ev;
        nl_done_event(res, o, &ev);
        ev.nworkers = f->n;
        ev.workers = f->step_w;
        f->hooks->event(f->hooks->ud, &ev);
    }
    return 0;
}
