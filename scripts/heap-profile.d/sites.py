"""The allocation sites of a heaptrack flame graph file (`heaptrack_print -F`), by bytes:
each stack named by its innermost frames of interest (the allocator's and std's own
containers left out), the bytes divided by the number of items held (argv[2])."""
import collections
import re
import sys

SKIP = re.compile(
    r"\((alloc|mod|boxed|slice|vec|string|spec_from_elem|spec_from_iter\w*|convert|function|"
    r"arc|sync|borrow|str|clone|macros|iterator|iter|map|option|result|bytes_mut|unix|lib)\.rs\)"
    r"|^_RN|^alloc$|^realloc|^malloc|^<unresolved")
path, items = sys.argv[1], int(sys.argv[2])
sites = collections.Counter()
total = 0
for line in open(path):
    stack, _, cost = line.rstrip().rpartition(" ")
    total += int(cost)
    frames = [f for f in stack.split(";") if not SKIP.search(f)]
    sites[" <- ".join(f[:60] for f in reversed(frames[-4:]))] += int(cost)
for site, cost in sites.most_common(20):
    print(f"{cost / items:10.0f}  {site}")
print(f"{total / items:10.0f}  in all (the process's own baseline included)")
