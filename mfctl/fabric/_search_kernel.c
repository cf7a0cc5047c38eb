/* The planner's local search, compiled: the same search as mfctl/fabric/search.py's
 * ``local_search`` (relief pairs, the move table, best improvement, ties to the first move),
 * one region after another, with each candidate's objective computed in full.
 *
 * Why compiled (issue 22): a 64-GPU region's search is ~6.5 rounds of ~90 candidates on
 * arrays of a few dozen numbers; numpy spends it in ~75 calls a round (~0.2 ms) and
 * cannot go under ~1 ms a region. Here a candidate costs O(L n^2) flops (~0.1 us at
 * n = 8, L = 1). The Python side (search.py) builds every input, including the move table,
 * checks shapes and dtypes, and falls back to the numpy search where this module was not
 * built: this file holds no planning rule of its own beyond what search.py documents.
 *
 * Arrays arrive through the buffer protocol, C-contiguous, float64 or int64:
 *   worse [R, L, P]       per pair the larger direction's bytes
 *   full  [R, L, n*n]     dispatch bytes (zero diagonal)
 *   inv_circuit [cmax+1]  1 / (c * lane rate), s/B (0 for c = 0)
 *   eps_inv [n]           1 / each server's EPS rate, s/B
 *   pair_of [n*n]         pair of each matrix entry, P on the diagonal
 *   pos [M, 4], give_i [M], give_j [M], gain [M], join [M]  the move table
 *   C [R, P] (in/out)     circuits per pair
 *   ports [R, n]          OCS lanes per server
 *   stop_below [R]        a region stops once its objective is at most this (-inf: never)
 *   best [R] (out)        each region's objective, s
 * Returns the most rounds any region ran (a round = one evaluation of its candidates).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const int64_t SIGNS[4] = {1, -1, -1, 1};
#define REL_EPS 1e-9

typedef struct {
    Py_ssize_t R, L, n, P, M, cmax;
    const double *worse, *full, *inv_circuit, *eps_inv;
    const int64_t *pair_of, *pos, *give_i, *give_j, *gain, *join, *ports;
    Py_ssize_t *end_a, *end_b; /* [P] the two servers of each pair (a < b), from pair_of */
} Problem;

/* Objective of circuits c [P + 1] (c[P] = 0) for region r; per [L] gets each all-to-all's time.
 * eg, ig: scratch [L * n] (each server's EPS egress / ingress time). A pair's bytes go over the
 * EPS in both directions while it has no circuit. */
static double objective(const Problem *pb, Py_ssize_t r, const int64_t *c, double *per, double *eg, double *ig) {
    const Py_ssize_t L = pb->L, n = pb->n, P = pb->P;
    double total = 0.0;
    for (Py_ssize_t l = 0; l < L; l++) {
        const double *w = pb->worse + (r * L + l) * P;
        const double *f = pb->full + (r * L + l) * n * n;
        double *e = eg + l * n, *g = ig + l * n;
        double m = 0.0;
        for (Py_ssize_t a = 0; a < n; a++) e[a] = g[a] = 0.0;
        for (Py_ssize_t p = 0; p < P; p++) {
            if (c[p]) {
                double t = w[p] * pb->inv_circuit[c[p]];
                if (t > m) m = t;
            } else {
                const Py_ssize_t a = pb->end_a[p], b = pb->end_b[p];
                const double ab = f[a * n + b], ba = f[b * n + a];
                e[a] += ab;
                g[b] += ab;
                e[b] += ba;
                g[a] += ba;
            }
        }
        for (Py_ssize_t a = 0; a < n; a++) {
            e[a] *= pb->eps_inv[a];
            g[a] *= pb->eps_inv[a];
            if (e[a] > m) m = e[a];
            if (g[a] > m) m = g[a];
        }
        per[l] = m;
        total += m;
    }
    return 4.0 * total;
}

/* relief [P + 1]: the pairs whose extra circuit could lower some all-to-all's maximum
 * (search.py, step 1), from the current state's per/eg/ig. */
static void relief_pairs(const Problem *pb, Py_ssize_t r, const int64_t *c, const double *per, const double *eg,
                         const double *ig, unsigned char *relief) {
    const Py_ssize_t L = pb->L, n = pb->n, P = pb->P;
    memset(relief, 0, (size_t)(P + 1));
    for (Py_ssize_t l = 0; l < L; l++) {
        if (!(per[l] > 0)) continue;  /* an all-to-all that takes no time has nothing to relieve */
        const double at_max = per[l] * (1 - REL_EPS);
        const double *w = pb->worse + (r * L + l) * P;
        const double *f = pb->full + (r * L + l) * n * n;
        for (Py_ssize_t p = 0; p < P; p++)
            if (w[p] * pb->inv_circuit[c[p]] >= at_max) relief[p] = 1;
        for (Py_ssize_t p = 0; p < P; p++) {
            if (c[p]) continue;
            const Py_ssize_t a = pb->end_a[p], b = pb->end_b[p];
            if ((f[a * n + b] > 0 && (eg[l * n + a] >= at_max || ig[l * n + b] >= at_max)) ||
                (f[b * n + a] > 0 && (eg[l * n + b] >= at_max || ig[l * n + a] >= at_max)))
                relief[p] = 1;
        }
    }
    relief[P] = 0;
}

/* One region's best-improvement search; returns its rounds, or -1 on a bad circuit count. */
static long search_region(const Problem *pb, Py_ssize_t r, int64_t *C, long max_rounds, double stop_below,
                          double *best_out, int64_t *c, int64_t *cand, double *per, double *eg, double *ig,
                          double *per2, double *eg2, double *ig2, unsigned char *give, unsigned char *relief) {
    const Py_ssize_t n = pb->n, P = pb->P, M = pb->M;
    const int64_t *ports = pb->ports + r * n;
    memcpy(c, C + r * P, (size_t)P * sizeof(int64_t));
    c[P] = 0;
    for (Py_ssize_t p = 0; p < P; p++)
        if (c[p] < 0 || c[p] > pb->cmax) return -1;
    double best = objective(pb, r, c, per, eg, ig);
    long rounds = 0;
    while (rounds < max_rounds && best > stop_below) {
        rounds++;
        /* what each end can give: a circuit of pair p, a free port of server a */
        for (Py_ssize_t p = 0; p < P; p++) give[p] = c[p] > 0;
        for (Py_ssize_t a = 0; a < n; a++) {
            int64_t used = 0;
            for (Py_ssize_t b = 0; b < n; b++)
                if (b != a) used += c[pb->pair_of[a * n + b]];
            give[P + a] = ports[a] - used > 0;
        }
        relief_pairs(pb, r, c, per, eg, ig, relief);
        Py_ssize_t pick = -1;
        double pick_val = 0.0;
        for (Py_ssize_t mv = 0; mv < M; mv++) {
            if (!(give[pb->give_i[mv]] && give[pb->give_j[mv]] && (relief[pb->gain[mv]] || relief[pb->join[mv]]))) continue;
            memcpy(cand, c, (size_t)(P + 1) * sizeof(int64_t));
            const int64_t *q = pb->pos + mv * 4;
            for (int u = 0; u < 4; u++) cand[q[u]] += SIGNS[u];
            cand[P] = 0;
            int ok = 1;
            for (int u = 0; u < 4; u++)
                if (cand[q[u]] < 0 || cand[q[u]] > pb->cmax) ok = 0;
            if (!ok) continue;  /* cannot happen with give[] as built; never index out of inv_circuit */
            double v = objective(pb, r, cand, per2, eg2, ig2);
            if (pick < 0 || v < pick_val) {
                pick = mv;
                pick_val = v;
            }
        }
        if (pick < 0 || !(pick_val < best * (1 - REL_EPS))) break;  /* a local optimum */
        const int64_t *q = pb->pos + pick * 4;
        for (int u = 0; u < 4; u++) c[q[u]] += SIGNS[u];
        c[P] = 0;
        best = objective(pb, r, c, per, eg, ig);
    }
    memcpy(C + r * P, c, (size_t)P * sizeof(int64_t));
    *best_out = best;
    return rounds;
}

static int need(Py_buffer *b, Py_ssize_t count, Py_ssize_t item, const char *name) {
    if (b->len != count * item) {
        PyErr_Format(PyExc_ValueError, "_search_kernel: %s has %zd bytes, expected %zd", name, b->len, count * item);
        return 0;
    }
    return 1;
}

static PyObject *local_search(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bw, bf, bic, bei, bpo, bpos, bgi, bgj, bga, bjo, bC, bports, bstop, bbest;
    Py_ssize_t R, L, n, M;
    long max_rounds;
    if (!PyArg_ParseTuple(args, "nnnnly*y*y*y*y*y*y*y*y*y*w*y*y*w*", &R, &L, &n, &M, &max_rounds, &bw, &bf, &bic, &bei,
                          &bpo, &bpos, &bgi, &bgj, &bga, &bjo, &bC, &bports, &bstop, &bbest))
        return NULL;
    Py_buffer *all[] = {&bw, &bf, &bic, &bei, &bpo, &bpos, &bgi, &bgj, &bga, &bjo, &bC, &bports, &bstop, &bbest};
    PyObject *ret = NULL;
    unsigned char *mem = NULL;
    const Py_ssize_t P = n * (n - 1) / 2, D = sizeof(double), I = sizeof(int64_t);
    if (R < 0 || L < 1 || n < 2 || M < 0) {
        PyErr_SetString(PyExc_ValueError, "_search_kernel: bad sizes");
        goto done;
    }
    if (!(need(&bw, R * L * P, D, "worse") && need(&bf, R * L * n * n, D, "full") && need(&bei, n, D, "eps_inv") &&
          need(&bpo, n * n, I, "pair_of") && need(&bpos, M * 4, I, "pos") && need(&bgi, M, I, "give_i") &&
          need(&bgj, M, I, "give_j") && need(&bga, M, I, "gain") && need(&bjo, M, I, "join") && need(&bC, R * P, I, "C") &&
          need(&bports, R * n, I, "ports") && need(&bstop, R, D, "stop_below") && need(&bbest, R, D, "best")))
        goto done;
    if (bic.len < D || bic.len % D) {
        PyErr_SetString(PyExc_ValueError, "_search_kernel: inv_circuit must hold at least one float64");
        goto done;
    }
    Problem pb = {R, L, n, P, M, bic.len / D - 1, bw.buf, bf.buf, bic.buf, bei.buf, bpo.buf, bpos.buf, bgi.buf, bgj.buf,
                  bga.buf, bjo.buf, bports.buf, NULL, NULL};
    /* every index the search follows stays inside its array */
    for (Py_ssize_t k = 0; k < n * n; k++)
        if (pb.pair_of[k] < 0 || pb.pair_of[k] > P) goto bad_table;
    for (Py_ssize_t k = 0; k < M; k++) {
        for (int u = 0; u < 4; u++)
            if (pb.pos[k * 4 + u] < 0 || pb.pos[k * 4 + u] > P) goto bad_table;
        if (pb.give_i[k] < 0 || pb.give_i[k] >= P + n || pb.give_j[k] < 0 || pb.give_j[k] >= P + n || pb.gain[k] < 0 ||
            pb.gain[k] > P || pb.join[k] < 0 || pb.join[k] > P)
            goto bad_table;
    }
    /* every pair 0..P-1 is the pair of exactly one (a, b) with a < b */
    for (Py_ssize_t a = 0; a < n; a++)
        for (Py_ssize_t b = 0; b < n; b++)
            if ((a == b) != (pb.pair_of[a * n + b] == P) || pb.pair_of[a * n + b] != pb.pair_of[b * n + a]) goto bad_table;
    size_t scratch = (size_t)(2 * P) * sizeof(Py_ssize_t) + (size_t)(2 * (P + 1)) * I + (size_t)(2 * L + 4 * L * n) * D +
                     (size_t)(P + n + P + 1);
    mem = PyMem_Malloc(scratch ? scratch : 1);
    if (!mem) {
        PyErr_NoMemory();
        goto done;
    }
    pb.end_a = (Py_ssize_t *)mem;
    pb.end_b = pb.end_a + P;
    for (Py_ssize_t p = 0; p < P; p++) pb.end_a[p] = -1;
    for (Py_ssize_t a = 0; a < n; a++)
        for (Py_ssize_t b = a + 1; b < n; b++) {
            pb.end_a[pb.pair_of[a * n + b]] = a;
            pb.end_b[pb.pair_of[a * n + b]] = b;
        }
    for (Py_ssize_t p = 0; p < P; p++)
        if (pb.end_a[p] < 0) goto bad_table;
    int64_t *c = (int64_t *)(pb.end_b + P), *cand = c + P + 1;
    double *per = (double *)(cand + P + 1), *per2 = per + L, *eg = per2 + L, *ig = eg + L * n, *eg2 = ig + L * n,
           *ig2 = eg2 + L * n;
    unsigned char *give = (unsigned char *)(ig2 + L * n), *relief = give + P + n;
    long most = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < R; r++) {
        long k = search_region(&pb, r, (int64_t *)bC.buf, max_rounds, ((double *)bstop.buf)[r], (double *)bbest.buf + r,
                               c, cand, per, eg, ig, per2, eg2, ig2, give, relief);
        if (k < 0) {
            bad = 1;
            break;
        }
        if (k > most) most = k;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "_search_kernel: a circuit count outside 0..max circuits");
        goto done;
    }
    ret = PyLong_FromLong(most);
    goto done;
bad_table:
    PyErr_SetString(PyExc_ValueError, "_search_kernel: an index of the move table or pair map out of range");
done:
    PyMem_Free(mem);
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) PyBuffer_Release(all[k]);
    return ret;
}

static PyMethodDef methods[] = {
    {"local_search", local_search, METH_VARARGS,
     "local_search(R, L, n, M, max_rounds, worse, full, inv_circuit, eps_inv, pair_of, pos, give_i, give_j, gain, join,"
     " C, ports, stop_below, best) -> rounds: mfctl.fabric.search.local_search's search, compiled (see search.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_search_kernel",
                                    "The planner's local search, compiled (mfctl/fabric/search.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__search_kernel(void) { return PyModule_Create(&module); }
