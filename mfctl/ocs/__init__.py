"""OCS control: TL1 codec, client over serial/TCP/SSH, Polatis-style driver, journal."""
