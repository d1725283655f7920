# Writes one man page per function of pglock(3), so that `man
# pglock_hold_start` works as `man curl_easy_setopt` does, from the one
# source of the library's manual, docs/pglock.3, at build time:
#
#   awk -v dir=OUTDIR -f cmake/man3_pages.awk docs/pglock.3
#
# Nothing here names a function: a page is written for each function that
# pglock(3)'s SYNOPSIS declares, so a function renamed or added there gets
# its page at the next build, and tests/cli/library_install.bats checks
# that the pages are exactly the exported symbols.  A page holds the
# function's lines of the SYNOPSIS and, as its DESCRIPTION, the whole
# section of pglock(3) that describes it, the one whose comments say
#
#   .\" man3 summary: the NAME line's description (for whatis and apropos)
#   .\" man3 pages: pglock_a pglock_b ...   (repeatable)
#
# right under its heading, so that the reader lands on the text itself
# rather than on a pointer to it.  POSIX awk only (Debian builds with mawk).

function fail(msg) {
    print "cmake/man3_pages.awk: " FILENAME ": " msg | "cat 1>&2"
    failed = 1
    exit 1
}

# The title of a .SH or .SS line, unquoted.
function heading(line) {
    sub(/^\.S[HS][ \t]+/, "", line)
    gsub(/"/, "", line)
    return line
}

NR == 1 {
    if ($1 != ".TH")
        fail("line 1 is not a .TH line")
    # The date, source and manual of pglock(3) are the pages' too.
    th_tail = $0
    sub(/^\.TH[ \t]+[^ \t]+[ \t]+[^ \t]+[ \t]+/, "", th_tail)
    next
}

/^\.SH / {
    part = heading($0)
    in_synopsis = (part == "SYNOPSIS")
    current = ""
    if (in_synopsis)
        next
    # Sections after SYNOPSIS may be a home: the RETURN VALUE is
    # pglock_strerror()'s.
    nsec++
    title[nsec] = part
    next
}

/^\.SS / {
    nsec++
    title[nsec] = heading($0)
    next
}

in_synopsis {
    if ($0 ~ /^\.fi/) {
        current = ""
        next
    }
    # A declaration starts with the function's name before the first "(" of
    # its first quoted string; the lines that follow until the next
    # declaration or paragraph break are its own (continued arguments, the
    # options struct's initialiser).
    if ($0 ~ /^\.BI "[^"(]*pglock_[a-z0-9_]+\(/) {
        name = $0
        sub(/\(.*/, "", name)
        sub(/.*[ *]/, "", name)
        if (name in decl)
            fail("SYNOPSIS declares " name " twice")
        nfunc++
        func_name[nfunc] = name
        decl[name] = $0
        current = name
        next
    }
    if ($0 ~ /^\.(PP|nf)/ || $0 !~ /^\.BI/) {
        current = ""
        # What comes before the first declaration (#include, how to
        # link) heads every page's SYNOPSIS.
        if (nfunc == 0)
            preamble = preamble $0 "\n"
        next
    }
    if (current == "")
        fail("a .BI line of SYNOPSIS that no declaration owns: " $0)
    decl[current] = decl[current] "\n" $0
    next
}

/^\.\\" man3 summary: / {
    if (nsec == 0)
        fail("a man3 summary before any section")
    s = $0
    sub(/^\.\\" man3 summary: /, "", s)
    summary[nsec] = s
    next
}

/^\.\\" man3 pages: / {
    if (nsec == 0)
        fail("man3 pages before any section")
    for (i = 4; i <= NF; i++) {
        if ($i in home)
            fail($i " is listed by two sections, " title[home[$i]] " and " title[nsec])
        home[$i] = nsec
        members[nsec] = members[nsec] " " $i
    }
    next
}

nsec > 0 {
    text[nsec] = text[nsec] $0 "\n"
}

# write_page(NAME): dir/NAME.3, its section of pglock(3) as DESCRIPTION.
function write_page(name,    page, sec, n, others, i, see) {
    page = dir "/" name ".3"
    sec = home[name]
    print ".\\\" Generated at build time from pglock(3) by cmake/man3_pages.awk:" >page
    print ".\\\" edit docs/pglock.3, not this page." >page
    print ".TH " name " 3 " th_tail >page
    print ".SH NAME" >page
    print name " \\- " summary[sec] >page
    print ".SH SYNOPSIS" >page
    printf "%s", preamble >page
    print decl[name] >page
    print ".fi" >page
    print ".SH DESCRIPTION" >page
    print "The text below is the section" >page
    print ".B \"" title[sec] "\"" >page
    print "of" >page
    print ".BR pglock (3)," >page
    print "where the other sections it names are." >page
    print ".PP" >page
    printf "%s", text[sec] >page
    print ".SH SEE ALSO" >page
    # pglock(3), then the other pages of the same section.
    n = split(members[sec], others, " ")
    see = "pglock"
    for (i = 1; i <= n; i++)
        if (others[i] != name)
            see = see " " others[i]
    n = split(see, others, " ")
    for (i = 1; i <= n; i++)
        print ".BR \\%" others[i] " (3)" (i < n ? "," : "") >page
    close(page)
}

END {
    if (failed)
        exit 1
    if (dir == "")
        fail("no output directory: awk -v dir=DIR")
    if (nfunc == 0)
        fail("its SYNOPSIS declares no function")
    for (i = 1; i <= nfunc; i++) {
        if (!(func_name[i] in home))
            fail(func_name[i] " is in the SYNOPSIS but no section lists it in a \".\\\" man3 pages:\" comment")
        if (summary[home[func_name[i]]] == "")
            fail("section " title[home[func_name[i]]] " has man3 pages but no \".\\\" man3 summary:\"")
    }
    for (f in home)
        if (!(f in decl))
            fail(f " is listed in man3 pages but not declared in the SYNOPSIS")
    for (i = 1; i <= nfunc; i++)
        write_page(func_name[i])
}
