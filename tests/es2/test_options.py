"""es2.Options: compile's options as one value, or its fields as keywords for short."""
import dataclasses

import pytest

from workbench import es2
from workbench.es2.options import NAMES


def test_options_are_checked_when_made():
    with pytest.raises(ValueError, match="^dense must be 'fixed16' or 'float', not 'half'$"):
        es2.Options(dense="half")
    with pytest.raises(ValueError, match="^scaled_bits must be 8 or 16, not 12$"):
        es2.Options(scaled_bits=12)
    with pytest.raises(ValueError, match="^check must be True or False, not 'yes'$"):
        es2.Options(check="yes")
    assert es2.Options(check=None, tune="two threads").tune == "two threads"


def test_keywords_are_its_fields_over_the_options_given():
    given = es2.Options(shared=True, scaled_bits=8)
    assert es2.Options.of(given, {"scaled_bits": 16}) == es2.Options(shared=True)
    assert es2.Options.of(None, {}) == es2.Options()
    with pytest.raises(ValueError, match="^fit must be True or False, not 'no'$"):
        es2.Options.of(given, {"fit": "no"})


def test_compile_refuses_an_unknown_keyword_as_python_does():
    with pytest.raises(TypeError, match=r"^compile\(\) got an unexpected keyword argument "
                                        r"'tunes'$"):
        es2.compile(object(), tunes=True)
    with pytest.raises(TypeError, match="^options: an es2.Options, not dict$"):
        es2.compile(object(), None, {"tune": True})


def test_every_option_is_a_field_with_a_default_and_documented():
    """One source for the names: compile takes them as Options' fields, each with its
    default, each documented in Options' docstring."""
    assert NAMES == tuple(f.name for f in dataclasses.fields(es2.Options))
    assert all(f"``{name}``" in es2.Options.__doc__ for name in NAMES)
    es2.Options()  # (every field has a default)
