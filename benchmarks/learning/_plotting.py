"""Drawing shared by the learning benchmarks' figures (matplotlib, Agg)."""


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def band(axis, x, mean, low, high, **line):
    """Draws `mean` against `x` (`line`: its plot keywords) with [low, high]
    shaded in its colour; returns the line."""
    drawn, = axis.plot(x, mean, **line)
    axis.fill_between(x, low, high, color=drawn.get_color(), alpha=0.2)
    return drawn
