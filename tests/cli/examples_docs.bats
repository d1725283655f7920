#!/usr/bin/env bats
# The docs' examples run.  Every code block of README.md, docs/*.md and the
# man pages' EXAMPLES is either named (`<!-- example: NAME -->` before a
# markdown fence, `.\" example: NAME` before a man page's .EX) and run by a
# test that looks it up with `doc_block FILE NAME` (tests/cli/helpers.bash),
# or marked as a fragment: its first line is a comment with `fragment:` and
# why it cannot run here.  The first test fails on a block that is neither.
#
# The blocks run as written against the harness's server, with these
# substitutions only, each at its test:
#   - a key name (nightly-billing, scheduler, migrations) becomes this
#     test's own key $K, so that tests running at once do not collide;
#   - a server the docs name (-d app, -d "host=db1 dbname=app",
#     host=pgbouncer) becomes the harness's ($PGLOCK_TEST_PRIMARY,
#     $PGLOCK_TEST_POOLER);
#   - /usr/local/bin/ becomes a directory holding pglock and stub jobs
#     (the cron lines and systemd units, which must name /usr/bin/pglock
#     and /usr/local/bin, run in tests/cli/examples.bats with the build
#     mounted there).
# The jobs the examples name (billing, rebuild-report, transfer, alembic,
# scheduler) are stubs that record that they ran.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    SRC=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    bin=$out/bin
    mkdir -p "$bin"
    ln -s "$PGLOCK_BIN" "$bin/pglock"
    local job
    for job in billing bill rebuild-report transfer alembic; do
        printf '#!/bin/sh\necho "%s $*" >>%s/ran\n' "$job" "$out" >"$bin/$job"
        chmod +x "$bin/$job"
    done
    printf '#!/bin/sh\necho $$ >%s/scheduler.started\nexec sleep 60\n' "$out" >"$bin/scheduler"
    chmod +x "$bin/scheduler"
    PATH=$bin:$PATH
    export PATH bin
}
teardown() { teardown_run; }

# check_docs FILE...: the checker.  Prints "NAME FILE NAME" for each named
# block and "BAD FILE:LINE: why" for each code block that is neither named
# nor a fragment.  Markdown: every fence has a language; `text` (output,
# transcripts, synopses, file formats) needs no test; an indented code block
# is refused (fence it, so that it is checked).  Man pages: the .EX blocks
# of EXAMPLE(S).
check_docs() {
    awk '
    function bad(why) { printf "BAD %s:%d: %s\n", FILENAME, FNR, why }
    FNR == 1 { infence = 0; prev = ""; ex = 0; roff = (FILENAME !~ /\.md$/) }
    !roff && /^```/ && !infence {
        infence = 1; lang = substr($0, 4); first = 1
        named = (prev ~ /^<!-- example: [a-z0-9-]+ -->$/)
        if (named) { split(prev, w, " "); print "NAME", FILENAME, w[3] }
        if (lang == "") bad("a block without a language: tag it (text for output, transcripts, file formats)")
        prev = $0; next
    }
    !roff && infence && $0 == "```" {
        if (first && !named && lang != "text" && lang != "") bad("an empty ```" lang " block")
        infence = 0; prev = $0; next
    }
    !roff && infence && first {
        first = 0
        if (lang != "text" && lang != "" && !named && $0 !~ /fragment:/)
            bad("a ```" lang " block that no test runs: name it (<!-- example: NAME -->) and run it in a test, or make its first line a fragment: comment")
    }
    !roff && !infence && /^    [^ ]/ && prev == "" { bad("an indented code block: fence it with a language") }
    roff && /^\.SH/ { ex = ($0 ~ /^\.SH "?EXAMPLES?"?$/) }
    roff && ex && /^\.EX/ {
        infence = 1; first = 1
        named = (prev ~ /^\.\\" example: [a-z0-9-]+$/)
        if (named) { split(prev, w, " "); print "NAME", FILENAME, w[3] }
        prev = $0; next
    }
    roff && infence && /^\.EE/ { infence = 0; prev = $0; next }
    roff && infence && first {
        first = 0
        if (!named && $0 !~ /fragment:/)
            bad("an EXAMPLES block that no test runs: name it (.\\\" example: NAME) and run it in a test, or make its first line a fragment: comment")
    }
    { prev = $0 }' "$@"
}

@test "every code block of the README, docs/*.md and the man pages' EXAMPLES is run by a test or marked as a fragment" {
    cd "$SRC"
    local docs=(README.md docs/*.md docs/*.1 docs/*.3) found name file users
    [ "${#docs[@]}" -ge 15 ]
    found=$(check_docs "${docs[@]}")
    if grep '^BAD ' <<<"$found"; then false; fi
    # every name once, and looked up by a test, in its own file
    [ -z "$(awk '$1 == "NAME" { print $3 }' <<<"$found" | sort | uniq -d)" ]
    [ "$(grep -c '^NAME ' <<<"$found")" -ge 20 ]
    while read -r _ file name; do
        users=$(grep -lE "doc_block $file $name( |\"|\)|$)" tests/cli/*.bats || true)
        [ -n "$users" ] || { echo "$file: example $name: no test runs it (doc_block $file $name)"; false; }
    done <<<"$found"
    # The check can fail: an unnamed shell block, an untagged fence, an
    # indented block and an unnamed man page example are each refused; a
    # fragment and a text block are not.
    printf '# t\n\n```sh\nrm -rf /\n```\n\n```\nout\n```\n\n    indented\n\n```sh\n# fragment: needs yours\nx\n```\n\n```text\n$ y\n```\n' >"$out/t.md"
    printf '.SH EXAMPLES\n.EX\npglock run x \\-\\- y\n.EE\n.EX\n# fragment: z\n.EE\n' >"$out/t.1"
    run -0 check_docs "$out/t.md" "$out/t.1"
    [ "$(grep -c '^BAD ' <<<"$output")" = 4 ]
    [[ "$output" == *"t.md:4: a \`\`\`sh block that no test runs"* ]]
    [[ "$output" == *"t.md:7: a block without a language"* ]]
    [[ "$output" == *"t.md:11: an indented code block"* ]]
    [[ "$output" == *"t.1:3: an EXAMPLES block that no test runs"* ]]
}

@test "no paragraph of a man page ends mid-sentence (a text line with no closing punctuation before a new paragraph)" {
    local page cut
    # An example (.EX, .in) may follow a colon-less lead-in, a .TP tag's
    # body and the NAME line need none.
    for page in "$SRC"/docs/*.1 "$SRC"/docs/*.3; do
        cut=$(awk '{ l[NR] = $0 }
            END {
                for (i = 2; i < NR; i++) {
                    t = l[i]
                    if (t ~ /^\./ || t ~ /^\\"/ || t == "" || t ~ /[.:;!?)]$/) continue
                    if (l[i + 1] !~ /^\.(IP|PP|P|LP|TP|SH|SS)( |$)/) continue
                    if (l[i + 2] ~ /^\.(EX|in)( |$)/) continue
                    if (l[i - 1] ~ /^\.SH NAME/ || (i > 2 && l[i - 2] ~ /^\.TP/)) continue
                    printf "%s:%d: %s\n", FILENAME, i, t
                }
            }' "$page")
        [ -z "$cut" ] || { echo "a sentence cut short: $cut"; false; }
    done
}

@test "pglock run with a per-customer key (README, pglock(1)) and docs/guarantees.md's three runs" {
    local block
    # README and pglock(1) show the same line
    [ "$(doc_block README.md readme-run)" = "$(doc_block docs/pglock.1 man-run)" ]
    export CUSTOMER_ID=$((RANDOM + 100000)) FROM=$((RANDOM + 200000)) TO=$((RANDOM + 300000))
    run -0 sh -c "$(doc_block docs/pglock.1 man-run)"
    [ "$(cat "$out/ran")" = "rebuild-report $CUSTOMER_ID" ]
    rm "$out/ran"
    block=$(doc_block docs/guarantees.md guarantees-run)
    block=${block//-d \"host=db1 dbname=app\"/-d \"\$PGLOCK_TEST_PRIMARY\"}
    block=${block//nightly-billing/$K}
    block=${block//\/usr\/local\/bin\//$bin/}
    [[ "$block" == *"--try -d \"\$PGLOCK_TEST_PRIMARY\" $K -- $bin/billing"* ]]
    run -0 sh -ec "$block"
    [ "$(cat "$out/ran")" = "$(printf 'billing \nrebuild-report %s\ntransfer %s %s' "$CUSTOMER_ID" "$FROM" "$TO")" ]
}

@test "pglock lead (README, docs/guarantees.md): the leader runs the scheduler until stopped, then exits 143" {
    local name cmd pid st
    for name in readme-lead guarantees-lead; do
        if [ "$name" = readme-lead ]; then cmd=$(doc_block README.md readme-lead)
        else cmd=$(doc_block docs/guarantees.md guarantees-lead); fi
        [[ "$cmd" == *" scheduler -- /usr/local/bin/scheduler" ]]
        cmd=${cmd// scheduler -- / $K -- }
        cmd=${cmd//\/usr\/local\/bin\//$bin/}
        rm -f "$out/scheduler.started"
        sh -c "exec $cmd" >"$out/lead.out" 2>&1 &
        pid=$!
        echo "$pid" >"$out/lead.pid"
        wait_until 15 file_exists "$out/scheduler.started"
        held "$K"
        kill -TERM "$pid"
        st=0
        wait "$pid" || st=$?
        cat "$out/lead.out"
        [ "$st" = 143 ]
        gone "$(cat "$out/scheduler.started")"
        wait_until 10 not_held "$K"
    done
}

# with_db BLOCK: BLOCK with `-d app` pointed at the harness's server and
# the key nightly-billing made this test's own, jobs from $bin.
with_db() {
    local b=$1
    b=${b//-d app/-d \"\$PGLOCK_TEST_PRIMARY\"}
    b=${b//nightly-billing/$K}
    printf '%s\n' "${b//\/usr\/local\/bin\//$bin/}"
}

@test "the run history (README, docs/operations.md): init, a recorded run, history names it, check says OK" {
    local block
    block=$(with_db "$(doc_block docs/operations.md ops-init)")
    [[ "$block" == "pglock init -d \"\$PGLOCK_TEST_PRIMARY\" "* ]]
    run -0 sh -ec "$block"
    [[ "$output" == *GRANT* ]]
    block=$(with_db "$(doc_block README.md readme-history)")
    [ "$(grep -c '^pglock ' <<<"$block")" = 4 ]
    run -0 sh -ec "$block"
    echo "$output"
    grep -qx 'bill ' "$out/ran"
    [[ "$output" == *succeeded*"$K"* ]]
    [[ "$output" == *"PGLOCK OK - $K succeeded"* ]]
}

@test "pglock terminate (docs/operations.md): without a terminal the first line only shows and refuses; --yes ends the holder" {
    local block first second
    block=$(doc_block docs/operations.md ops-terminate)
    first=$(sed -n 1p <<<"$block")
    second=$(sed -n 2p <<<"$block")
    [ "$(wc -l <<<"$block")" = 2 ]
    bg h run "$K" -- sleep 60
    wait_until 10 held "$K"
    run -64 sh -c "${first//nightly-billing/$K}" </dev/null
    [[ "$output" == *"--yes is needed"* ]]
    held "$K"
    run -0 sh -c "${second//nightly-billing/$K}"
    [[ "$output" == *"terminated backend pid"* ]]
    finish h 10
    [ "$(status_of h)" = 74 ]
}

@test "docs/deployment.md's PgBouncer line runs through the harness's PgBouncer" {
    need PGLOCK_TEST_POOLER
    local block
    block=$(doc_block docs/deployment.md deploy-pgbouncer)
    [[ "$block" == *'-d "host=pgbouncer port=6432 dbname=app"'* ]]
    block=${block//host=pgbouncer port=6432 dbname=app/\$PGLOCK_TEST_POOLER}
    run -0 sh -ec "${block//nightly-billing/$K}"
    grep -qx 'billing ' "$out/ran"
}

@test "migrations from a deploy (pglock(1)): pglock run --foreground -c runs the shell string" {
    local block
    block=$(doc_block docs/pglock.1 man-migrations)
    [[ "$block" == *"-d \"\$DATABASE_URL\" migrations -c 'alembic upgrade head'" ]]
    DATABASE_URL=$PGLOCK_TEST_PRIMARY run -0 sh -ec "${block// migrations / $K }"
    grep -qx 'alembic upgrade head' "$out/ran"
}

@test "the key's SQL (docs/keys.md, pglock(1)) and pglock key (pglock-key(1)) name the same bigint, and the SQL takes the lock" {
    local sql value
    # pglock-key(1): the example, and the bigint the page says it shows
    run -0 sh -ec "$(doc_block docs/pglock-key.1 man-key | sed 's/^\$ //')"
    value=$(grep -oE 'the bigint \\-[0-9]+' "$SRC/docs/pglock-key.1" | sed 's/.*\\-/-/')
    [ "$value" = -3003901418071974465 ]
    [[ "$output" == *"$value"* ]]
    # pglock(1)'s SQL names it too, and runs
    sql=$(doc_block docs/pglock.1 man-sql)
    [[ "$sql" == *"($value);"* ]]
    run -0 q "$sql"
    [[ "$output" == t || "$output" == f ]]
    # docs/keys.md's SQL: its expression is that value; run as written
    # (on this test's key), it takes the lock
    sql=$(doc_block docs/keys.md keys-sql)
    [ "$(q "${sql/pg_advisory_lock(/(}")" = "$value" ]
    run -0 env PGOPTIONS='-c lock_timeout=10s' psql -X -q -A -t -v ON_ERROR_STOP=1 "$PGLOCK_TEST_PRIMARY" \
        -c "${sql//nightly-billing/$K}" -c "select count(*) from pg_locks where locktype = 'advisory' and pid = pg_backend_pid() and granted"
    [ "$(tail -1 <<<"$output")" = 1 ]
}

@test "docs/keys.md's registry file is read as it says" {
    doc_block docs/keys.md keys-registry >"$out/keys.conf"
    run -0 pglock key --keys "$out/keys.conf" @nightly-billing @customer-report @migrations
    [[ "$output" == *72001* ]]
    [[ "$output" == *42:9* ]]
    run -0 pglock key migrations
    local hashed
    hashed=$(grep -oE -- '-?[0-9]{6,}' <<<"$output" | head -1)
    run -0 pglock key --keys "$out/keys.conf" @migrations
    [[ "$output" == *"$hashed"* ]]
}

@test "docs/deployment.md's Kubernetes CronJob (a fragment) is well-formed and uses options pglock has" {
    local yaml
    doc_block docs/deployment.md deploy-k8s >"$out/cronjob.yaml"
    head -1 "$out/cronjob.yaml" | grep -q '^# fragment: '
    # the options in the container's command exist
    local opt
    for opt in --try --min-hold --conflict-exit-code; do
        pglock run --help | grep -qE -- "^ +(-., )?$opt\b"
        grep -qE -- "\"$opt" "$out/cronjob.yaml"
    done
    python3 -c 'import yaml' 2>/dev/null || skip "python3's yaml module is not installed: not parsed"
    yaml=$(python3 -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
j = d["spec"]["jobTemplate"]["spec"]
p = j["template"]["spec"]
c = p["containers"][0]
print(d["kind"], d["spec"]["concurrencyPolicy"], p["restartPolicy"], c["command"][0], c["command"][1],
      [r["onExitCodes"]["values"] for r in j["podFailurePolicy"]["rules"] if "onExitCodes" in r],
      [e["name"] for e in c["env"]])' "$out/cronjob.yaml")
    [ "$yaml" = "CronJob Forbid Never /usr/local/bin/pglock run [[64]] ['PGHOST', 'PGDATABASE', 'PGUSER', 'PGPASSWORD']" ]
}

@test "the README's map of the tree names paths that exist, and every top-level directory of the tree" {
    cd "$SRC"
    local rows row cell1 cell2 tok base bases checked=0
    rows=$(awk '/^## Where things live/ { m = 1; next } /^## / { m = 0 } m && /^\| `/' README.md)
    [ "$(wc -l <<<"$rows")" -ge 10 ]
    while IFS= read -r row; do
        cell1=$(cut -d'|' -f2 <<<"$row")
        cell2=$(cut -d'|' -f3- <<<"$row")
        bases=()
        base=.
        # the first cell: paths from the top (a bare name: beside the one before)
        while IFS= read -r tok; do
            [[ "$tok" == */* ]] || tok=$base/$tok
            compgen -G "$tok" >/dev/null || { echo "the map names $tok, which is not in the tree"; false; }
            if [[ "$tok" == */ ]]; then base=${tok%/}; else base=$(dirname "$tok"); fi
            bases+=("$base")
            checked=$((checked + 1))
        done < <(grep -oE '`[^` ]+`' <<<"$cell1" | tr -d '`')
        # the second cell: file and directory names, in the first cell's
        # directories (or from the top, with a slash inside); NAME is a
        # placeholder (cmd_NAME.c)
        while IFS= read -r tok; do
            tok=${tok//NAME/*}
            local hit=
            if [[ "${tok%/}" == */* ]]; then compgen -G "$tok" >/dev/null && hit=1
            else
                for base in "${bases[@]}"; do compgen -G "$base/$tok" >/dev/null && hit=1; done
            fi
            [ -n "$hit" ] || { echo "the map's row for${cell1} names $tok, which is not there"; false; }
            checked=$((checked + 1))
        done < <(grep -oE '`[A-Za-z0-9_.*/-]+(\.[ch1-3]|\.md|\.sh|/)`' <<<"$cell2" | tr -d '`')
    done <<<"$rows"
    [ "$checked" -ge 50 ]
    # every top-level directory of the tree has its row
    command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout: the tree's directories are not known"
    local dir
    for dir in $(git ls-files | grep / | cut -d/ -f1 | sort -u); do
        grep -qE "^\| [^|]*\`$dir/" <<<"$rows" || { echo "the map has no row for $dir/"; false; }
    done
}
