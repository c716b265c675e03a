# Two call chains alternating as fast as possible: a_parent→a_leaf and b_parent→b_leaf reuse
# the same frame addresses (CPython gh-151613). A correct frame cache never reports a_leaf
# under b_parent or b_leaf under a_parent. The first argument sets each leaf's loop (50: a few
# microseconds a call; thousands keep a leaf running across an anchor write).
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50


def a_leaf():
    x = 0
    for i in range(N):
        x += i
    return x


def b_leaf():
    x = 0
    for i in range(N):
        x -= i
    return x


def a_parent():
    return a_leaf()


def b_parent():
    return b_leaf()


print("ready", flush=True)
while True:
    a_parent()
    b_parent()
