"""DescribeStacks answers a ``CommaDelimitedList`` parameter as the text it was given.

AWS: a ``CommaDelimitedList`` parameter is "an array of literal strings that
are separated by commas"; templates see the list, and ``Parameter.ParameterValue``
of DescribeStacks is the value as passed, e.g. ``a,b,c``.
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_Parameter.html

moto 5.2.5 answers the Python repr of the split list (``['a', 'b', 'c']``).
"""

from __future__ import annotations

from moto.cloudformation.models import Stack


def apply() -> None:
    original = Stack.parameter_list

    def parameter_list(self):
        return [
            {**p, "ParameterValue": ",".join(map(str, p["ParameterValue"]))}
            if isinstance(p["ParameterValue"], list)
            else p
            for p in original.fget(self)
        ]

    Stack.parameter_list = property(parameter_list)
