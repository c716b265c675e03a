# Chains that differ only inside generators. One long-lived generator is resumed in turn by
# a_drive and b_drive (its frame stays at one address, under two callers), and a fresh
# generator is made per call by a_fresh and b_fresh (freed frames come back at the same
# addresses). Each generator runs the leaf of the caller that resumed it, so a stack naming an
# `a_` caller above a `b_` leaf (or the reverse) never happened. argv[1]: each leaf's loop.
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def a_work():
    x = 0
    for i in range(N):
        x += i
    return x


def b_work():
    x = 0
    for i in range(N):
        x -= i
    return x


def shared():
    who = yield
    while True:
        a_work() if who == "a" else b_work()
        who = yield


def a_gen():
    yield a_work()


def b_gen():
    yield b_work()


def a_drive(g):
    g.send("a")


def b_drive(g):
    g.send("b")


def a_fresh():
    for _ in a_gen():
        pass


def b_fresh():
    for _ in b_gen():
        pass


g = shared()
next(g)
print("ready", flush=True)
while True:
    a_drive(g)
    b_drive(g)
    a_fresh()
    b_fresh()
