from . import attention
