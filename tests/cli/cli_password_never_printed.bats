#!/usr/bin/env bats
# A malformed conninfo URI makes libpq quote part of it in its error,
# password included ("invalid percent-encoded token: "s3cr%ZZet"").  No
# command prints it: each says one line, exits 64 (the conninfo is the
# caller's mistake), and the password is
# nowhere in its output.

bats_require_minimum_version 1.5.0

load helpers

setup() {
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
}

# refused_without_password URI PASSWORD CMD...: `pglock CMD -d URI ...`
# exits 64 with one error line, and PASSWORD (or a piece of it) is not
# in its output.
refused_without_password() {
    local uri=$1 pw=$2 cmd=$3
    shift 3
    run --separate-stderr "$PGLOCK_BIN" "$cmd" -d "$uri" "$@"
    echo "pglock $cmd: status $status, stderr: $stderr, stdout: $output"
    [ "$status" -eq 64 ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "$stderr" == "pglock: error: "* ]]
    [[ "$stderr$output" != *"$pw"* ]]
    [[ "$stderr$output" != *"${pw:0:4}"* ]]
}

every_command_refuses_without_password() {
    local uri=$1 pw=$2
    refused_without_password "$uri" "$pw" run 1 -- true
    refused_without_password "$uri" "$pw" lead 1 -- true
    refused_without_password "$uri" "$pw" status
    refused_without_password "$uri" "$pw" doctor
    refused_without_password "$uri" "$pw" key hashtext:x
}

@test "a bad percent-encoding in the password is reported, the password is not" {
    every_command_refuses_without_password \
        'postgresql://app:s3cr%ZZet@localhost/db' 's3cr%ZZet'
    # the rest of libpq's message is kept: it says what is wrong
    run --separate-stderr "$PGLOCK_BIN" status -d 'postgresql://app:s3cr%ZZet@localhost/db'
    [ "$stderr" = 'pglock: error: invalid percent-encoded token: "***"' ]
}

@test "a URI libpq quotes whole is not printed either" {
    every_command_refuses_without_password \
        'postgresql://app:hunter2secret@[::1/db' 'hunter2secret'
}

@test "a '\"' in the password does not end libpq's quote early" {
    every_command_refuses_without_password \
        'postgresql://app:a"b%ZZsecret@localhost/db' 'b%ZZsecret'
}

@test "a bad token outside the password is shown: it holds no secret" {
    run --separate-stderr "$PGLOCK_BIN" status -d 'postgresql://app:s3cret@localhost/db%zz'
    [ "$status" -eq 64 ]
    [ "$stderr" = 'pglock: error: invalid percent-encoded token: "db%zz"' ]
    # the same token as the password too: hidden
    run --separate-stderr "$PGLOCK_BIN" status -d 'postgresql://db%zz:db%zz@localhost/db'
    [ "$stderr" = 'pglock: error: invalid percent-encoded token: "***"' ]
}

@test "a misspelt keyword is still named: a name is no secret" {
    run --separate-stderr "$PGLOCK_BIN" status -d 'host=localhost bogus_option=1 password=s3cret'
    [ "$status" -eq 64 ]
    [ "$stderr" = 'pglock: error: invalid connection option "bogus_option"' ]
    # unless the password is that very word
    run --separate-stderr "$PGLOCK_BIN" status -d 'postgresql://app:bogus@localhost/db?bogus=1'
    [ "$stderr" = 'pglock: error: invalid URI query parameter: "***"' ]
}

@test "a server's own refusal is printed whole: it quotes no password" {
    need PGLOCK_TEST_PRIMARY
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY dbname=pglock_no_such_db"
    [ "$status" -eq 69 ]
    [[ "$stderr" == *'database "pglock_no_such_db" does not exist'* ]]
}
