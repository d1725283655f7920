#!/usr/bin/env python3
"""check.py [--kill-after-ms N] [--server-kinds "K ..."] DIR

The chaos suite's checker.  Reads, from DIR (tests/chaos/chaos.sh):

  jobs.log    TIME_US HOST MODE TOKEN PID EVENT [DETAIL...]   (job.sh)
  faults.log  START_US END_US KIND HOST PGLOCK_PID ok|failed
  exits.log   TIME_US HOST MODE PGLOCK_PID STATUS START_US rec=0|1
              startw=N endw=N   (the warnings it printed about its record)
  runs.log    ID HOST PGLOCK_PID TOKEN OUTCOME EXIT_STATUS STARTED_US ENDED_US
              (pglock.runs at the end of each scene; "-" for null)
  terms.log   TIME_US HOST MODE PGLOCK_PID      (our SIGTERM to a pglock)
  hangs.log   a pglock that did not end when it should have
  final.log   per scene: leftover-process / lock-held / scene-end

and proves:
  - no overlap after a silent loss: no job's line, and no job's process
    (alive= in the next holder's lines, from /proc), falls inside another
    job's run unless a server-caused fault explains it;
  - an overlap a server-caused fault explains lasts at most
    kill-after + 250 ms; each is reported with its fault;
  - a library host (MODE lib-*: hold_host.c) stopped past the lease
    (stop, stoppg on its own pid) has no watchdog: after the SIGCONT it
    may finish a step, so its overlap, counted from the SIGCONT (it ran
    nothing while stopped) to its end line, is at most its step + 250 ms;
  - fencing tokens strictly increase in start order within a scene (a
    pglock lead that restarts its command reuses its token: not an
    inversion, nor when it restarts after a server-caused loss it has not
    seen yet and another job took a token in between: that overlap is
    bounded above, and the older token is what fencing rejects; the
    partition scene's server has a sequence of its own);
  - every pglock exited with a documented status, none hung: each ended
    within 8 s of our SIGTERM, or of its job's end when the job ignores
    SIGTERM (pglock forwards it and keeps the lock while the job runs);
  - nothing held and no pglock or job process left at the end of a scene;
  - every recorded run (--record) agrees with what its pglock and its jobs'
    lines say happened: it belongs to a pglock that recorded, its outcome
    and exit status are that pglock's, it started before its first job
    and ended (if recorded) after its last job's last line and no later
    than its pglock's exit; an end pglock said it could not write stayed
    unwritten (never landing later), and a run without an end is one of
    those, or its pglock was killed.
Prints the figures; exits 1 on any violation.
"""
import argparse
import collections
import os
import sys

ALLOWED_EXITS = {0, 69, 74, 75, 137, 143}


class Job:
    def __init__(self, host, mode, token, pid, t):
        self.host, self.mode, self.pid = host, mode, pid
        self.token = None if token == "-" else int(token)
        self.first = self.last = t
        self.pglock = "-"
        self.end = None           # "ok", "term" or None (killed)
        self.ignores_term = False
        self.alive = {}           # earlier job pid -> last time seen alive
        self.alive_gone = {}      # earlier job pid -> first line it was gone
        self.step_ms = None       # library hosts: their step
        self.sudo = None          # sudo jobs: "refused" or "root"
        self.no_lease = False     # library hosts: dead_peer_ms only


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.split() for ln in f if ln.strip()]


def parse_jobs(path):
    jobs, current = [], {}
    for f in read_lines(path):
        if len(f) < 6:
            continue
        t, host, mode, token, pid, event = int(f[0]), f[1], f[2], f[3], f[4], f[5]
        detail = dict(x.split("=", 1) for x in f[6:] if "=" in x)
        if event == "start":
            j = Job(host, mode, token, pid, t)
            j.pglock = detail.get("pglock", "-")
            j.ignores_term = detail.get("ignore_term") == "1"
            j.step_ms = int(detail["step_ms"]) if "step_ms" in detail else None
            j.sudo = detail.get("sudo")
            j.no_lease = detail.get("lease") == "none"
            jobs.append(j)
            current[pid] = j
        j = current.get(pid)
        if j is None:
            continue
        j.last = max(j.last, t)
        if event == "end":
            j.end = f[6] if len(f) > 6 else "?"
        alive = detail.get("alive", "-")
        now = set() if alive == "-" else set(alive.split(","))
        for p in now:
            j.alive[p] = t
        for p in j.alive:
            if p not in now and p not in j.alive_gone:
                j.alive_gone[p] = t
    jobs.sort(key=lambda j: j.first)
    return jobs


class Pglock:
    """One pglock (or library host) process, from exits.log."""
    def __init__(self, e):
        self.end, self.host, self.mode, self.pid, self.rc = int(e[0]), e[1], e[2], e[3], int(e[4])
        self.t0 = int(e[5]) if len(e) > 5 else None
        kv = dict(x.split("=", 1) for x in e[6:] if "=" in x)
        self.rec = kv.get("rec") == "1"
        self.startw, self.endw = int(kv.get("startw", 0)), int(kv.get("endw", 0))


def check_records(d, jobs, exits, violations):
    """Compares each row of runs.log with its pglock and its jobs; returns
    the figures' line."""
    rows = read_lines(os.path.join(d, "runs.log"))
    pglocks = [Pglock(e) for e in exits if len(e) > 5]
    by_host_pid = collections.defaultdict(list)
    for p in pglocks:
        by_host_pid[(p.host, p.pid)].append(p)
    rows_of = collections.defaultdict(list)
    for r in rows:
        rid, host, pid, token, outcome, status = r[:6]
        started, ended = int(r[6]), None if r[7] == "-" else int(r[7])
        row = dict(id=rid, token=None if token == "-" else int(token), outcome=outcome,
                   status=None if status == "-" else int(status), started=started, ended=ended)
        p = next((p for p in by_host_pid[(host, pid)] if p.t0 <= started <= p.end), None)
        if p is None or not p.rec:
            violations.append(f"record: run {rid} on {host} (pid {pid}) belongs to no pglock "
                              f"that recorded")
            continue
        rows_of[p].append(row)
    outcomes = collections.Counter()
    for p in (p for p in pglocks if p.rec):
        prs = rows_of[p]
        mine = [j for j in jobs if j.host == p.host and j.pglock == p.pid and p.t0 <= j.first <= p.end]
        who = f"{p.host}/{p.mode} pid {p.pid} (exit {p.rc})"
        unrec = sum(1 for r in prs if r["outcome"] == "-")
        killed = p.rc == 137
        if unrec < p.endw:
            violations.append(f"record: {who} could not write {p.endw} end(s), yet only {unrec} "
                              f"run(s) are without one: an end given up on landed later")
        if unrec > p.endw + p.startw + killed:
            violations.append(f"record: {who} left {unrec} run(s) without an end, but said so "
                              f"of {p.endw} and was {'' if killed else 'not '}killed")
        terms = {j.token for j in mine} if p.mode == "lead" else ({None} if mine else set())
        covered = {r["token"] for r in prs} if p.mode == "lead" else ({None} if prs else set())
        if len(terms - covered) > p.startw:
            violations.append(f"record: {who}: {len(terms - covered)} run(s) of its jobs without a "
                              f"row, {p.startw} start(s) it said it could not record")
        for i, r in enumerate(prs):
            outcomes[r["outcome"] if r["outcome"] != "-" else "unrecorded"] += 1
            what = f"record: run {r['id']} of {who}, {r['outcome']}"
            js = [j for j in mine if p.mode != "lead" or j.token == r["token"]]
            if r["outcome"] == "skipped":
                if p.rc != 75 or js:
                    violations.append(f"{what}: skipped, but it exited {p.rc} with {len(js)} job(s)")
                continue
            if js and r["started"] > js[0].first:
                violations.append(f"{what}: started {ms(r['started'] - js[0].first):.0f} ms after "
                                  f"its first job's start")
            if r["ended"] is not None:
                # The end is the job's (on pglock's clock, from started_at):
                # after its last line, and no later than pglock's exit plus
                # what started_at may be ahead of the moment pglock sent the
                # INSERT (2 ms each way: the clocks' resolution in the sum).
                latest = p.end + (r["started"] - p.t0) + 2000
                if js and r["ended"] < js[-1].last - 2000:
                    violations.append(f"{what}: ended {ms(js[-1].last - r['ended']):.0f} ms before "
                                      f"its last job's last line")
                if r["ended"] > latest:
                    violations.append(f"{what}: ended {ms(r['ended'] - p.end):.0f} ms after its "
                                      f"pglock exited: the time of a late write, not of the end")
            if r["outcome"] == "-":
                continue
            last = i == len(prs) - 1
            if r["outcome"] == "lost" and r["status"] != 74:
                violations.append(f"{what} with exit status {r['status']}")
            if p.mode != "lead" or last and r["outcome"] != "lost":
                if r["status"] != p.rc:
                    violations.append(f"{what}: exit status {r['status']} recorded, pglock's {p.rc}")
            elif r["outcome"] != "lost" and not (
                    r["outcome"] in ("killed", "failed") and r["status"] != 74
                    and js and all(j.end != "ok" for j in js)):
                # a leadership before the last ends lost, or handed on to a
                # --replace: its job stopped (SIGTERM, or SIGKILL after its
                # grace) and its own status recorded, never a success
                violations.append(f"{what}: a leadership before the last that did not end lost")
            if p.mode != "lead" and (r["outcome"] == "lost") != (p.rc == 74):
                violations.append(f"{what}: pglock exited {p.rc}")
            if js and r["outcome"] == "succeeded" and js[-1].end != "ok":
                violations.append(f"{what}: its job's end was {js[-1].end or 'a kill'}")
            if js and r["outcome"] == "killed" and js[-1].end is not None:
                violations.append(f"{what}: its job ended by itself ({js[-1].end})")
    n = sum(1 for p in pglocks if p.rec)
    return (f"recorded: {n} pglocks, {sum(outcomes.values())} runs ("
            f"{', '.join(f'{o} {k}' for o, k in sorted(outcomes.items()))}), each checked "
            f"against its jobs' lines")


def scene_of(host):
    """A host's scene: its name without the number (direct3: direct)."""
    return host.rstrip("0123456789")


def ms(us):
    return us / 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kill-after-ms", type=int, default=500)
    ap.add_argument("--server-kinds", default="terminate restart-fast restart-immediate restart-pooler",
                    help="KIND, or SCENE:KIND for a kind server-caused in that scene only")
    ap.add_argument("dir")
    a = ap.parse_args()
    server_kinds = set(a.server_kinds.split())

    def server_caused(f):
        """Whether fault f frees the lock on the server (its host names its scene)."""
        return f[2] in server_kinds or any(
            k.partition(":")[2] == f[2] and f[3].startswith(k.partition(":")[0])
            for k in server_kinds if ":" in k)
    bound_ms = a.kill_after_ms + 250
    d = a.dir

    jobs = parse_jobs(os.path.join(d, "jobs.log"))
    faults = [(int(f[0]), int(f[1]), f[2], f[3], f[4], f[5]) for f in read_lines(os.path.join(d, "faults.log"))]
    exits = read_lines(os.path.join(d, "exits.log"))
    violations = []

    def cause_of(a_job, b_job):
        """The fault that explains b starting while a still ran: the last one
        begun before b's start that had not ended before a's start."""
        best = None
        for f in faults:
            if f[0] <= b_job.first and f[1] >= a_job.first - 1_000_000:
                best = f
        return best

    # Overlaps, from lines and from /proc.
    bounded = []
    stepped = []      # library hosts after a stop: (overlap, bound, text)
    by_pid_recent = {}
    for i, b in enumerate(jobs):
        for aj in jobs[max(0, i - 50):i]:
            line_overlap = aj.last > b.first
            proc_overlap = aj.pid in b.alive and by_pid_recent.get(aj.pid) is aj
            if not (line_overlap or proc_overlap):
                continue
            end = aj.last
            if proc_overlap:
                end = max(end, b.alive_gone.get(aj.pid, b.last))
            over = ms(end - b.first)
            f = cause_of(aj, b)
            what = (f"{b.host}/{b.mode} pid {b.pid} (token {b.token}) started while "
                    f"{aj.host}/{aj.mode} pid {aj.pid} (token {aj.token}) "
                    f"{'ran' if line_overlap else 'still existed'}: {over:.0f} ms")
            if (f is not None and f[2] in ("stop", "stoppg") and aj.step_ms is not None
                    and f[4] == aj.pglock):
                # Stopped with its hold: it ran nothing until the SIGCONT,
                # and stops at its end line (the live file goes with it).
                after = aj.last if aj.end else end
                over = ms(after - max(b.first, f[1]))
                step_bound = aj.step_ms + 250
                text = (f"{what}; {over:.0f} ms after the SIGCONT of a {f[2]} "
                        f"at +{ms(f[0] - jobs[0].first) / 1000:.1f}s (step {aj.step_ms} ms)")
                stepped.append((over, step_bound, text))
                if over > step_bound:
                    violations.append(f"library host ran longer than its step + 250 ms "
                                      f"({step_bound} ms) after a stop: {text}")
            elif f is not None and server_caused(f):
                fdesc = f"after {f[2]} at +{ms(f[0] - jobs[0].first) / 1000:.1f}s"
                bounded.append((over, f[2], f"{what}, {fdesc}"))
                if over > bound_ms:
                    violations.append(f"overlap longer than kill-after + 250 ms ({bound_ms} ms): {what}, {fdesc}")
            else:
                fdesc = f"after {f[2]} of {f[3]}" if f else "with no fault"
                violations.append(f"overlap after a silent loss: {what}, {fdesc}")
        by_pid_recent[b.pid] = b

    # Tokens in start order.  A token's high bits are the server's
    # timeline (2^48 and up): counted per scene, they show how many
    # promotions the order held across.
    inversions = 0
    late_restarts = []
    timelines = collections.defaultdict(set)
    for j in jobs:
        if j.token is not None:
            timelines[scene_of(j.host)].add(j.token >> 48)
    for aj, b in zip(jobs, jobs[1:]):
        if aj.token is None or b.token is None:
            violations.append(f"job without a token: {(aj if aj.token is None else b).pid}")
            continue
        if scene_of(aj.host) != scene_of(b.host):
            continue      # the partition scene's server has tokens of its own
        if b.token > aj.token:
            continue
        same_leadership = (aj.mode == b.mode == "lead" and aj.host == b.host
                           and aj.pglock == b.pglock and b.token == aj.token)
        # A lead restarted its command, with its leadership's token, after
        # a server-caused loss it had not seen yet, and another holder's job
        # came in between: the overlap is bounded above, and the older
        # token is what a fenced resource rejects.
        f = cause_of(aj, b)
        restarted_late = (b.mode == "lead" and f is not None and server_caused(f) and any(
            j.mode == "lead" and j.host == b.host and j.pglock == b.pglock and j.token == b.token
            for j in jobs if j.first < aj.first))
        if same_leadership:
            continue
        if restarted_late:
            late_restarts.append(f"{b.host}/lead pid {b.pid} restarted with token {b.token} after "
                                 f"{aj.host}/{aj.mode} took token {aj.token}, after {f[2]}")
        else:
            inversions += 1
            violations.append(f"token inversion: {aj.host}/{aj.mode} pid {aj.pid} token {aj.token} "
                              f"then {b.host}/{b.mode} pid {b.pid} token {b.token}")

    # Exit statuses, hangs, final state.
    codes = collections.Counter()
    for e in exits:
        mode, rc = e[2], int(e[4])
        codes[(mode, rc)] += 1
        if rc not in ALLOWED_EXITS:
            violations.append(f"pglock {mode} pid {e[3]} on {e[1]} exited {rc}")
    for h in read_lines(os.path.join(d, "hangs.log")):
        violations.append("hang: " + " ".join(h[1:]))
    # Each host runs one pglock at a time: the SIGTERM's pglock is the
    # first of that host's exits with its pid at or after it, and its jobs
    # started after the host's exit before that (pids are reused).
    host_exits = collections.defaultdict(list)
    for e in exits:
        host_exits[e[1]].append((int(e[0]), e[3]))
    for exits_of_host in host_exits.values():
        exits_of_host.sort()
    for t, host, mode, pid in read_lines(os.path.join(d, "terms.log")):
        t, prev, end = int(t), 0, None
        for at, p in host_exits[host]:
            if at >= t and p == pid:
                end = at
                break
            prev = at
        if end is None:
            continue
        free = t
        for j in jobs:
            if j.host == host and j.pglock == pid and prev < j.first <= end and j.ignores_term:
                free = max(free, j.last)
        took = ms(end - free) / 1000
        if took > 8:
            since = "SIGTERM" if free == t else "its job, which ignores SIGTERM, ended"
            violations.append(f"slow exit: {host} {mode} pid {pid} ended {took:.1f} s after {since}")
    scenes = 0
    for f in read_lines(os.path.join(d, "final.log")):
        if f[0] == "scene-end":
            scenes += 1
        else:
            violations.append("at the end of scene " + f[1] + ": " + " ".join(f))

    record_figures = check_records(d, jobs, exits, violations)

    # Figures.
    kinds = collections.Counter(f[2] for f in faults if f[5] == "ok")
    ends = collections.Counter(j.end or "killed" for j in jobs)
    modes = collections.Counter(j.mode + ("(no lease)" if j.no_lease else "") for j in jobs)
    print(f"jobs: {len(jobs)} ({', '.join(f'{m} {n}' for m, n in sorted(modes.items()))}); "
          f"ended: {', '.join(f'{e} {n}' for e, n in sorted(ends.items()))}")
    print(record_figures)
    print(f"pglock exits: {', '.join(f'{m}:{rc} x{n}' for (m, rc), n in sorted(codes.items()))}")
    print(f"faults: {sum(kinds.values())} ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    storms = [int(x.split("=", 1)[1]) for f in read_lines(os.path.join(d, "faults.log"))
              for x in f[6:] if x.startswith("cancels=")]
    if storms:
        print(f"cancel storms: {len(storms)}, {sum(storms)} cancels sent")
    silent = sum(1 for v in violations if v.startswith("overlap after a silent loss"))
    print(f"overlaps after silent losses: {silent}")
    mx = max((o for o, _, _ in bounded), default=0)
    print(f"overlaps after server-caused losses: {len(bounded)}, max {mx:.0f} ms (bound {bound_ms} ms)")
    for _, _, text in bounded:
        print(f"  {text}")
    print(f"library hosts' overlaps after a stop: {len(stepped)}" + (
        f", max {max(o for o, _, _ in stepped):.0f} ms after the SIGCONT, the least margin "
        f"to its step + 250 ms {min(b - o for o, b, _ in stepped):.0f} ms" if stepped else ""))
    for _, _, text in stepped:
        print(f"  {text}")
    sudo = collections.Counter(j.sudo for j in jobs if j.sudo)
    print(f"sudo jobs: {sum(sudo.values())} (refused {sudo['refused']}, ran as root {sudo['root']})")
    print(f"token inversions: {inversions}; lead restarts with an older token after a "
          f"server-caused loss: {len(late_restarts)}; timelines the tokens named: "
          + ", ".join(f"{s} {min(t)}..{max(t)} ({len(t)})" for s, t in sorted(timelines.items())))
    promotions = [x.split("=", 1) for f in read_lines(os.path.join(d, "faults.log"))
                  for x in f[6:] if x.startswith(("promoted_ms=", "demoted_ms="))]
    for what in ("promoted_ms", "demoted_ms"):
        v = sorted(int(n) for k, n in promotions if k == what)
        if v:
            print(f"cluster faults, {what.split('_')[0]} after (ms): median {v[len(v) // 2]}, "
                  f"min {v[0]}, max {v[-1]} ({len(v)})")
    for text in late_restarts:
        print(f"  {text}")
    print(f"scenes ended clean: {scenes - sum(1 for v in violations if v.startswith('at the end'))} of {scenes}")
    if violations:
        print(f"VIOLATIONS: {len(violations)}")
        for v in violations:
            print(f"  {v}")
        return 1
    if not jobs:
        print("no job ran")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
