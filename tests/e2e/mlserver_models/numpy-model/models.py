import mlserver
import numpy as np
from mlserver import MLModel
from mlserver.codecs import decode_args


class NumpyModel(MLModel):
    """Doubles its input and adds the offset set in model-settings.json."""

    async def load(self) -> bool:
        self.offset = float(self.settings.parameters.extra["offset"])
        mlserver.register("numpy_rows", "Rows the numpy model saw")
        return True

    @decode_args
    async def predict(self, x: np.ndarray) -> np.ndarray:
        mlserver.log(numpy_rows=x.shape[0])
        return x * 2 + self.offset
