"""A model or endpoint configuration name is created once.

AWS: CreateModel / CreateEndpointConfig on a taken name fail with ValidationException
"Cannot create already existing model|endpoint configuration "<arn>"." and leave the
existing resource as it was.
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateModel.html
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpointConfig.html
"""

import pytest
from botocore.exceptions import ClientError

ROLE = "arn:aws:iam::123456789012:role/sm"


def _model(sm, image):
    sm.create_model(ModelName="taken", ExecutionRoleArn=ROLE, PrimaryContainer={"Image": image})


def _config(sm, instance_type):
    sm.create_endpoint_config(
        EndpointConfigName="taken",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": "taken", "InstanceType": instance_type, "InitialInstanceCount": 1}
        ],
    )


def test_a_second_create_model_is_refused_and_changes_nothing(aws):
    sm = aws("sagemaker")
    _model(sm, "first:1")
    with pytest.raises(ClientError) as err:
        _model(sm, "second:1")
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert "Cannot create already existing model" in err.value.response["Error"]["Message"]
    assert ":model/taken" in err.value.response["Error"]["Message"]
    assert sm.describe_model(ModelName="taken")["PrimaryContainer"]["Image"] == "first:1"


def test_a_second_create_endpoint_config_is_refused_and_changes_nothing(aws):
    sm = aws("sagemaker")
    _model(sm, "first:1")
    _config(sm, "ml.m5.large")
    with pytest.raises(ClientError) as err:
        _config(sm, "ml.c5.xlarge")
    message = err.value.response["Error"]["Message"]
    assert "Cannot create already existing endpoint configuration" in message
    assert ":endpoint-config/taken" in message
    variants = sm.describe_endpoint_config(EndpointConfigName="taken")["ProductionVariants"]
    assert variants[0]["InstanceType"] == "ml.m5.large"
