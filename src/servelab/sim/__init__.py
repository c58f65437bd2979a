"""The simulator: engines stepped on a virtual clock, priced by the operator cost model.

Its hot modules run compiled when the install compiled them and their sources have not
changed since (`native`); `BUILD` says which build this process runs.
"""

from servelab.sim.native import Build, select

BUILD: Build = select()
