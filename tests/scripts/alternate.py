# Two call chains alternating as fast as possible: a_parent→a_leaf and b_parent→b_leaf reuse
# the same frame addresses (CPython gh-151613). A correct frame cache never reports a_leaf
# under b_parent or b_leaf under a_parent.
def a_leaf():
    x = 0
    for i in range(50):
        x += i
    return x


def b_leaf():
    x = 0
    for i in range(50):
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
