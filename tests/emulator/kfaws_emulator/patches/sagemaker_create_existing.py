"""CreateModel and CreateEndpointConfig refuse a name that exists.

AWS: a model or endpoint configuration name is unique in an account and Region; creating
one again fails with ``ValidationException`` "Cannot create already existing model
"<arn>"." / "Cannot create already existing endpoint configuration "<arn>"."
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateModel.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpointConfig.html;
the messages as the API answers them). CreateEndpoint's refusal is in
``sagemaker_endpoint_runner``.

moto 5.2.5 replaces the existing model or configuration with the new one, silently.
"""

from __future__ import annotations

from moto.sagemaker.exceptions import ValidationError
from moto.sagemaker.models import SageMakerModelBackend
from moto.sagemaker.utils import arn_formatter

from ._common import wrap


def apply() -> None:
    def make_create_model(original):
        def create_model(self, model_name, *args, **kwargs):
            if model_name in self._models:
                arn = arn_formatter("model", model_name, self.account_id, self.region_name)
                raise ValidationError(message=f'Cannot create already existing model "{arn}".')
            return original(self, model_name, *args, **kwargs)

        return create_model

    def make_create_config(original):
        def create_endpoint_config(self, endpoint_config_name, *args, **kwargs):
            if endpoint_config_name in self.endpoint_configs:
                arn = arn_formatter("endpoint-config", endpoint_config_name, self.account_id, self.region_name)
                raise ValidationError(message=f'Cannot create already existing endpoint configuration "{arn}".')
            return original(self, endpoint_config_name, *args, **kwargs)

        return create_endpoint_config

    wrap(SageMakerModelBackend, "create_model", make_create_model)
    wrap(SageMakerModelBackend, "create_endpoint_config", make_create_config)
