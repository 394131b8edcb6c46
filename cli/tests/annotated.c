// Annotations end to end (tests/annotate.rs): bank transfers that lock both accounts, lower
// id first, with the nesting declared by subclasses ("subclass"), without it ("plain"), and a
// rank discipline broken by an audit that takes the ledger (rank 1) under an account (rank 2)
// ("ranks"). Without the recorder the annotations do nothing and the program runs the same.
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../recorder/include/foresight.h"

struct account {
    int id;
    long balance;
    pthread_mutex_t lock;
};

static struct account accounts[2];
static pthread_mutex_t ledger = PTHREAD_MUTEX_INITIALIZER;
static int annotate_subclass;

static void transfer(struct account *from, struct account *to, long amount) {
    struct account *first = from->id < to->id ? from : to;
    struct account *second = from->id < to->id ? to : from;
    if (annotate_subclass)
        foresight_lock_subclass(&first->lock, 0);
    pthread_mutex_lock(&first->lock);
    if (annotate_subclass)
        foresight_lock_subclass(&second->lock, 1);
    pthread_mutex_lock(&second->lock);
    from->balance -= amount;
    to->balance += amount;
    pthread_mutex_unlock(&second->lock);
    pthread_mutex_unlock(&first->lock);
}

static void *pay(void *arg) {
    (void)arg;
    transfer(&accounts[0], &accounts[1], 10);
    return NULL;
}

static void *refund(void *arg) {
    (void)arg;
    usleep(20000);
    transfer(&accounts[1], &accounts[0], 10);
    return NULL;
}

static void audit(void) {
    pthread_mutex_lock(&accounts[0].lock);
    pthread_mutex_lock(&ledger); // rank 1 under rank 2: a violation
    pthread_mutex_unlock(&ledger);
    pthread_mutex_unlock(&accounts[0].lock);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "plain";
    annotate_subclass = strcmp(mode, "subclass") == 0;
    for (int i = 0; i < 2; i++) {
        accounts[i].id = i;
        accounts[i].balance = 100;
        pthread_mutex_init(&accounts[i].lock, NULL);
        foresight_lock_class(&accounts[i].lock, "account");
    }
    if (strcmp(mode, "ranks") == 0) {
        foresight_lock_rank(&ledger, 1);
        foresight_lock_rank(&accounts[0].lock, 2);
        audit();
    } else {
        pthread_t t1, t2;
        pthread_create(&t1, NULL, pay, NULL);
        pthread_create(&t2, NULL, refund, NULL);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
    }
    printf("%s: %ld\n", mode, accounts[0].balance + accounts[1].balance);
    return 0;
}
