# Recursion that returns and re-enters through the same frame addresses: down() recurses 3
# levels to a_leaf, then 5 levels to b_leaf, over and over. A stack with a_leaf under any other
# number of down() frames than 4, b_leaf under any other than 6, or more than 6 down() frames,
# never happened. argv[1]: each leaf's loop.
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


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


def down(n, leaf):
    if n == 0:
        return leaf()
    return down(n - 1, leaf)


print("ready", flush=True)
while True:
    down(3, a_leaf)
    down(5, b_leaf)
