#!/usr/bin/env python3
"""Fails when a relative link in the Markdown docs does not resolve.

Checks README.md, CONTRIBUTING.md, bench/README.md and every .md under docs/ (the benchmark history
included): each relative link [text](path) or [text](path#anchor), and each reference definition
[key]: path, must name a file or folder that exists; an anchor into a Markdown file must name one of
its headings (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats).
Links inside code spans and fenced blocks are not links and are skipped; so are absolute URLs.
Usage: check_links.py REPO_ROOT
"""
import os
import re
import sys

LINK = re.compile(r'\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
REFERENCE = re.compile(r'^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$', re.M)
HEADING = re.compile(r'^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$', re.M)


def strip_code(text):
    text = re.sub(r'^\s*(```|~~~).*?^\s*\1[^\n]*$', '', text, flags=re.S | re.M)
    return re.sub(r'(`+)(?!`).*?(?<!`)\1(?!`)', '', text, flags=re.S)


def slug(heading):
    heading = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link in a heading: its text
    heading = heading.replace('`', '').strip().lower()
    heading = re.sub(r'[^\w\- ]', '', heading)
    return heading.replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding='utf-8') as f:
            text = strip_code(f.read())
        seen, found = {}, set()
        for h in HEADING.findall(text):
            s = slug(h)
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f'{s}-{n}')
        found.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))
        cache[path] = found
    return cache[path]


def markdown_files(root):
    for name in ('README.md', 'CONTRIBUTING.md', os.path.join('bench', 'README.md')):
        yield os.path.join(root, name)
    for folder, _, names in os.walk(os.path.join(root, 'docs')):
        for name in sorted(names):
            if name.endswith('.md'):
                yield os.path.join(folder, name)


def broken_links(path):
    with open(path, encoding='utf-8') as f:
        text = strip_code(f.read())
    for target in LINK.findall(text) + REFERENCE.findall(text):
        if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            yield target, 'no such file or folder'
        elif anchor and dest.endswith('.md') and anchor.lower() not in anchors(dest):
            yield target, f'no heading "#{anchor}" in {os.path.basename(dest)}'


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    root = os.path.abspath(sys.argv[1])
    files, failures = 0, 0
    for path in markdown_files(root):
        if not os.path.exists(path):
            print(f'{os.path.relpath(path, root)}: missing')
            failures += 1
            continue
        files += 1
        for target, why in broken_links(path):
            print(f'{os.path.relpath(path, root)}: ({target}): {why}')
            failures += 1
    if failures:
        print(f'{failures} broken link(s) in {files} Markdown files')
        return 1
    print(f'every relative link in {files} Markdown files resolves')
    return 0


if __name__ == '__main__':
    sys.exit(main())
