:PREROUTING
*nat
-j redirect ;=;OK
-j redirect --redirect-target RETURN;=;OK
