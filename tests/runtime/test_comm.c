#include "check.h"
int main(void){return check_summary();}
