/* A worker pool whose error path (a job that fails) takes the log lock; the recorded run has
 * no failing job, so `foresight coverage` lists that lock site as never executed. Lines with
 * a lock call are marked EXECUTED or NEVER: what the run without arguments does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static int failing_job = -1;
static int done;
static int failures;

static void report_failure(int job) {
    pthread_mutex_lock(&log_lock); /* NEVER */
    failures++;
    fprintf(stderr, "job %d failed\n", job);
    pthread_mutex_unlock(&log_lock);
}

static void *worker(void *arg) {
    int job = (int)(long)arg;
    if (job == failing_job)
        report_failure(job);
    pthread_mutex_lock(&queue_lock); /* EXECUTED */
    done++;
    pthread_cond_signal(&done_cond);
    pthread_mutex_unlock(&queue_lock);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t threads[2];
    if (argc > 1)
        failing_job = atoi(argv[1]);
    /* Taken before the workers start, so that they cannot both finish before main waits:
     * the wait below runs on every run. */
    pthread_mutex_lock(&queue_lock); /* EXECUTED */
    for (long i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, worker, (void *)i);
    while (done < 2)
        pthread_cond_wait(&done_cond, &queue_lock); /* EXECUTED */
    pthread_mutex_unlock(&queue_lock);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL); /* EXECUTED */
    return failures;
}
