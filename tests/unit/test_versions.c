/*
 * The growth rules of the public structs (pglock.h, "Structs that can
 * grow"), before any connection:
 *   - options: the init functions set the version and refuse one they do
 *     not know, the PGLOCK_*_OPTIONS_INIT macros give the same defaults,
 *     and the library refuses options whose version is zero (never
 *     initialised) with a message naming the init to call;
 *   - keys: the constructors zero the reserved bytes, and every function
 *     that takes a key refuses one whose reserved bytes or kind are wrong;
 *   - errors: need no initialising, every call sets each field.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

static void inits_set_the_version_and_refuse_unknown_ones(void **s)
{
    (void)s;
    pglock_options o;
    memset(&o, 0xAB, sizeof o);
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    assert_int_equal(o.version, PGLOCK_OPTIONS_VERSION);
    assert_int_equal(o.interrupt_fd, -1);
    assert_int_equal(pglock_options_init(&o, 0), PGLOCK_EINVAL);
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION + 1),
                     PGLOCK_EINVAL);
    assert_int_equal(o.connect_timeout_ms, 0);
    /* Version 1 is still accepted, and its init writes no byte beyond
     * version 1's struct (a program built against 1.0's header passes
     * that much). */
    memset(&o, 0xAB, sizeof o);
    assert_int_equal(pglock_options_init(&o, 1), 0);
    assert_int_equal(o.version, 1);
    assert_int_equal(o.interrupt_fd, -1);
    long untouched_o;
    memset(&untouched_o, 0xAB, sizeof untouched_o);
    assert_memory_equal(&o.connect_timeout_ms, &untouched_o,
                        sizeof untouched_o);

    pglock_hold_options h;
    assert_int_equal(pglock_hold_options_init(&h, PGLOCK_HOLD_OPTIONS_VERSION),
                     0);
    assert_int_equal(h.version, PGLOCK_HOLD_OPTIONS_VERSION);
    assert_int_equal(h.drive, PGLOCK_HOLD_THREAD);
    assert_null(h.on_lost);
    assert_int_equal(h.stop_budget_ms, 0);
    assert_int_equal(h.watch_stop_requests, 0);
    assert_int_equal(pglock_hold_options_init(&h, 0), PGLOCK_EINVAL);
    assert_int_equal(pglock_hold_options_init(&h, 4), PGLOCK_EINVAL);
    /* Version 2 writes no byte of version 3's watch_stop_requests. */
    memset(&h, 0xAB, sizeof h);
    assert_int_equal(pglock_hold_options_init(&h, 2), 0);
    assert_int_equal(h.stop_budget_ms, 0);
    int unwritten;
    memset(&unwritten, 0xAB, sizeof unwritten);
    assert_memory_equal(&h.watch_stop_requests, &unwritten, sizeof unwritten);
    /* Version 1 is still accepted, and its init writes no byte beyond
     * version 1's struct (a program built against 1.0's header passes
     * that much). */
    memset(&h, 0xAB, sizeof h);
    assert_int_equal(pglock_hold_options_init(&h, 1), 0);
    assert_int_equal(h.version, 1);
    assert_int_equal(h.drive, PGLOCK_HOLD_THREAD);
    long untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    assert_memory_equal(&h.stop_budget_ms, &untouched, sizeof untouched);
}

/* Field by field (padding may differ): the macro is the init's twin. */
static void the_options_init_macros_give_what_the_inits_give(void **s)
{
    (void)s;
    pglock_options m = PGLOCK_OPTIONS_INIT, o;
    memset(&o, 0xAB, sizeof o);
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    assert_int_equal(m.version, o.version);
    assert_int_equal(m.lease_ms, o.lease_ms);
    assert_ptr_equal(m.application_name, o.application_name);
    assert_int_equal(m.interrupt_fd, o.interrupt_fd);
    assert_int_equal(m.cancel_timeout_ms, o.cancel_timeout_ms);
    assert_int_equal(m.dead_peer_ms, o.dead_peer_ms);
    assert_int_equal(m.lifetime, o.lifetime);
    assert_int_equal(m.connect_timeout_ms, o.connect_timeout_ms);

    pglock_hold_options hm = PGLOCK_HOLD_OPTIONS_INIT, h;
    memset(&h, 0xAB, sizeof h);
    assert_int_equal(pglock_hold_options_init(&h, PGLOCK_HOLD_OPTIONS_VERSION),
                     0);
    assert_int_equal(hm.version, h.version);
    assert_int_equal(hm.drive, h.drive);
    assert_true(hm.on_lost == h.on_lost);
    assert_ptr_equal(hm.arg, h.arg);
    assert_int_equal(hm.stop_budget_ms, h.stop_budget_ms);
}

static void options_never_initialised_are_refused_before_connecting(void **s)
{
    (void)s;
    pglock_options o;
    memset(&o, 0, sizeof o); /* what `pglock_options o = {0};` gives */
    o.lease_ms = 3000;
    pglock_client *c = NULL;
    /* An address nobody answers on: a refusal that tried to connect would
     * say "could not connect", not name the init. */
    assert_int_equal(pglock_client_open(&c, "host=/nonexistent", &o),
                     PGLOCK_EINVAL);
    assert_non_null(strstr(pglock_client_error(c), "pglock_options_init"));
    pglock_client_close(c);
}

/* A program built against 1.0's header passes version 1 options, a struct
 * that ends before connect_timeout_ms: the library reads no byte past it
 * (the struct here is exactly that long, so valgrind and ASan would see
 * one read) and the rest keeps its default.  A bad value in it is still
 * refused before any connect. */
static void set_lease(void *opts, long ms)
{
    memcpy((char *)opts + offsetof(pglock_options, lease_ms), &ms, sizeof ms);
}

static void version_1_options_are_read_only_as_far_as_they_go(void **s)
{
    (void)s;
    size_t v1 = offsetof(pglock_options, connect_timeout_ms);
    void *o = malloc(v1);
    assert_non_null(o);
    assert_int_equal(pglock_options_init(o, 1), 0);
    set_lease(o, -1);
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open(&c, "host=/nonexistent", o),
                     PGLOCK_EINVAL);
    assert_non_null(strstr(pglock_client_error(c), "negative"));
    pglock_client_close(c);
    /* valid, it goes as far as connecting (nobody there) */
    set_lease(o, 0);
    c = NULL;
    assert_int_equal(pglock_client_open(&c, "host=/nonexistent", o),
                     PGLOCK_ECONNECT);
    pglock_client_close(c);
    free(o);
}

static int reserved_zero(const pglock_key *k)
{
    static const pglock_key zero;
    return memcmp(k->reserved, zero.reserved, sizeof k->reserved) == 0;
}

static void the_key_constructors_zero_the_reserved_bytes(void **s)
{
    (void)s;
    pglock_key k;
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_int64(&k, 1), 0);
    assert_true(reserved_zero(&k));
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_pair(&k, 1, 2), 0);
    assert_true(reserved_zero(&k));
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_text(&k, "nightly"), 0);
    assert_true(reserved_zero(&k));
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_hashtext(&k, "nightly"), 0);
    assert_true(reserved_zero(&k));
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_hashtextextended(&k, "nightly", 7), 0);
    assert_true(reserved_zero(&k));
    memset(&k, 0xAB, sizeof k);
    assert_int_equal(pglock_key_parse(&k, "42:9", NULL), 0);
    assert_true(reserved_zero(&k));
}

/* Each function that takes a key refuses it, naming the reason. */
static void refused_everywhere(const pglock_key *k, const char *why)
{
    char buf[64];
    assert_int_equal(pglock_key_format(k, buf, sizeof buf), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_locktag(k, NULL, NULL, NULL), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_sql(k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION, buf,
                                    sizeof buf),
                     PGLOCK_EINVAL);
    pglock_error e;
    assert_int_equal(pglock_key_resolve((pglock_key *)k, NULL, &e),
                     PGLOCK_EINVAL);
    assert_non_null(strstr(e.message, why));
    assert_non_null(strstr(e.message, "constructors"));
    /* A conn that is not NULL, never used: the key is refused first. */
    assert_int_equal(pglock_xact_lock((PGconn *)1, k, PGLOCK_EXCLUSIVE,
                                      PGLOCK_TRY, -1, &e),
                     PGLOCK_EINVAL);
    assert_non_null(strstr(e.message, why));
}

static void a_key_with_reserved_bytes_set_or_no_kind_is_refused(void **s)
{
    (void)s;
    pglock_key k;
    assert_int_equal(pglock_key_int64(&k, 42), 0);
    k.reserved[3] = 1;
    refused_everywhere(&k, "reserved bytes are not zero");

    memset(&k, 0, sizeof k); /* `pglock_key k = {0};` and nothing more */
    k.id = 42;
    refused_everywhere(&k, "kind");
}

/* The rule's other half: a key built by hand, reserved bytes zero, is a
 * key like any other. */
static void a_key_built_by_hand_with_zero_reserved_bytes_is_accepted(void **s)
{
    (void)s;
    pglock_key k = {.kind = PGLOCK_KEY_PAIR, .ns = 42, .nsid = 9};
    char buf[64];
    assert_int_equal(pglock_key_format(&k, buf, sizeof buf), 4);
    assert_string_equal(buf, "42:9");
}

static void an_error_needs_no_init_each_call_sets_every_field(void **s)
{
    (void)s;
    pglock_key k;
    pglock_key_int64(&k, 42);
    pglock_error e;
    memset(&e, 0xAB, sizeof e); /* garbage, as an uninitialised local */
    assert_int_equal(pglock_xact_lock(NULL, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                                      -1, &e),
                     PGLOCK_EINVAL);
    assert_int_equal(e.code, PGLOCK_EINVAL);
    assert_string_equal(e.sqlstate, "");
    assert_non_null(strstr(e.message, "no connection or key"));
    /* A call that succeeds empties it. */
    memset(&e, 0xAB, sizeof e);
    assert_int_equal(pglock_key_resolve(&k, NULL, &e), 0);
    assert_int_equal(e.code, 0);
    assert_string_equal(e.sqlstate, "");
    assert_string_equal(e.message, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inits_set_the_version_and_refuse_unknown_ones),
        cmocka_unit_test(the_options_init_macros_give_what_the_inits_give),
        cmocka_unit_test(
            options_never_initialised_are_refused_before_connecting),
        cmocka_unit_test(version_1_options_are_read_only_as_far_as_they_go),
        cmocka_unit_test(the_key_constructors_zero_the_reserved_bytes),
        cmocka_unit_test(a_key_with_reserved_bytes_set_or_no_kind_is_refused),
        cmocka_unit_test(
            a_key_built_by_hand_with_zero_reserved_bytes_is_accepted),
        cmocka_unit_test(an_error_needs_no_init_each_call_sets_every_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
