/*
 * Versioned structs: the init functions set the version and refuse one
 * they do not know; the library refuses a struct whose version is zero
 * (never initialised) or unknown, with a message naming the init to call.
 * No server: every refusal happens before a connection is made.
 */
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

    pglock_error e;
    assert_int_equal(pglock_error_init(&e, PGLOCK_ERROR_VERSION), 0);
    assert_int_equal(e.version, PGLOCK_ERROR_VERSION);
    assert_int_equal(e.code, 0);
    assert_string_equal(e.message, "");
    assert_int_equal(pglock_error_init(&e, 7), PGLOCK_EINVAL);

    pglock_hold_options h;
    assert_int_equal(
        pglock_hold_options_init(&h, PGLOCK_HOLD_OPTIONS_VERSION), 0);
    assert_int_equal(h.version, PGLOCK_HOLD_OPTIONS_VERSION);
    assert_int_equal(h.drive, PGLOCK_HOLD_THREAD);
    assert_null(h.on_lost);
    assert_int_equal(pglock_hold_options_init(&h, 0), PGLOCK_EINVAL);

    pglock_key k;
    memset(&k, 0, sizeof k);
    assert_int_equal(pglock_key_pair(&k, 1, 2), 0);
    assert_int_equal(k.version, PGLOCK_KEY_VERSION);
    assert_int_equal(pglock_key_parse(&k, "nightly", NULL, 0), 0);
    assert_int_equal(k.version, PGLOCK_KEY_VERSION);
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

static void a_key_built_by_hand_is_refused(void **s)
{
    (void)s;
    pglock_key k;
    memset(&k, 0, sizeof k);
    k.kind = PGLOCK_KEY_INT64;
    k.id = 42;
    char buf[64];
    assert_int_equal(pglock_key_format(&k, buf, sizeof buf), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_locktag(&k, NULL, NULL, NULL), PGLOCK_EINVAL);
    assert_int_equal(
        pglock_key_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION, buf, sizeof buf),
        PGLOCK_EINVAL);
    pglock_error e;
    pglock_error_init(&e, PGLOCK_ERROR_VERSION);
    assert_int_equal(pglock_key_resolve(&k, NULL, &e), PGLOCK_EINVAL);
    assert_non_null(strstr(e.message, "constructors"));
}

static void an_error_never_initialised_still_gets_the_message(void **s)
{
    (void)s;
    pglock_key k;
    pglock_key_int64(&k, 42);
    pglock_error e;
    memset(&e, 0, sizeof e);
    assert_int_equal(pglock_xact_lock(NULL, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                                      NULL, &e),
                     PGLOCK_EINVAL);
    assert_int_equal(e.code, PGLOCK_EINVAL);
    assert_non_null(strstr(e.message, "pglock_error_init"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(inits_set_the_version_and_refuse_unknown_ones),
        cmocka_unit_test(
            options_never_initialised_are_refused_before_connecting),
        cmocka_unit_test(a_key_built_by_hand_is_refused),
        cmocka_unit_test(an_error_never_initialised_still_gets_the_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
