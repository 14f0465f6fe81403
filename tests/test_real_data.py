"""benchmarks.real_data's command line: a --datasets name outside the chosen --tables set
is an error naming it, not a table silently left out of a run."""

import pytest
from absl import app

from benchmarks import real_data


def test_a_table_of_another_set_is_named_not_skipped():
    names = ["wine", "digits"]
    real_data.check_datasets(["digits"], "sixteen", names)
    real_data.check_datasets([], "sixteen", names)  # all of them
    with pytest.raises(app.UsageError) as raised:
        real_data.check_datasets(["wine", "vietnami", "computers"], "sixteen", names)
    assert str(raised.value) == (
        "--datasets=computers,vietnami: not in --tables=sixteen (its tables: wine, digits)"
    )
